"""Producer: a thin, fast, audited layer over confluent-kafka (librdkafka does batching, compression,
retries and idempotence; this class adds the ferry conventions).

Every message carries its event time as the record timestamp and the producing host in the
``ferry.host`` header. Delivery reports are served by a background poll thread; the audit counter counts
in the delivery callback, so only acknowledged messages count and a retried message counts once.
The per-message Python path is one ``produce`` call with positional arguments (keywords cost ~30 %).

Transactions (``transactional_id=``; docs/transactions.md): a thin pass-through of librdkafka's API
(init_transactions, begin_transaction, send_offsets_to_transaction, commit_transaction,
abort_transaction; librdkafka's KafkaException passes through, with its retriable / txn_requires_abort /
fatal flags). Audited only on commit: a transaction's delivered messages are counted aside and join the
audit counts when it commits (dropped when it aborts); the counts go to `_audit` through a second,
non-transactional producer, since a transactional one may only write inside a transaction.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable

from confluent_kafka import Producer as _RdProducer

from ferry.client.audit.counter import AuditCounter
from ferry.client.audit.event import AUDIT_TOPIC
from ferry.client.audit.publisher import AuditPublisher
from ferry.client.bootstrap import discover
from ferry.client.broker_metadata import list_topics
from ferry.client.errors import ClientError, ProducerClosedError, UnknownTopicError
from ferry.client.message import Message
from ferry.client.rate_limited_log import rate_limited_logger
from ferry.wire.client_config import ClientConfig

log = logging.getLogger("ferry.producer")
rdlog = rate_limited_logger("ferry.librdkafka")

HOST_HEADER = "ferry.host"
ACKS = {"all": "all", "-1": "all", "1": "1", "0": "0"}
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONERS = {"random": "random", "key": "murmur2_random"}  # murmur2 = the Java client's key hashing

DeliveryCallback = Callable[[object, object], None]


class Producer:
    def __init__(self, bootstrap: str | None = None, zookeeper: str | None = None, *, application: str = "ferry",
                 datacenter: str | None = None, acks: str | int = "all", linger_ms: int = 5,
                 batch_size: int = 1_000_000, compression: str = "lz4", partitioner: str = "random",
                 enable_idempotence: bool = True, retries: int | None = None, delivery_timeout_ms: int = 120_000,
                 queue_max_messages: int = 500_000, audit: bool = True, audit_tier: str = "producer",
                 audit_interval_s: float = 10.0, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000, client_config: ClientConfig | None = None,
                 **overrides: object) -> None:
        """``client_config``: TLS/SASL settings (librdkafka properties, wire/client_config.py) for a secured
        listener; brokers found in ZooKeeper are then reached on the listener of its security.protocol."""
        client_config = client_config or ClientConfig.plaintext()
        acks_value = ACKS.get(str(acks))
        if acks_value is None:
            raise ValueError(f"acks must be one of all, -1, 1, 0 (got {acks!r})")
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)} (got {compression!r})")
        if partitioner not in PARTITIONERS:
            raise ValueError(f"partitioner must be 'random' or 'key' (got {partitioner!r})")
        if transactional_id is not None and not enable_idempotence:
            raise ValueError("a transactional producer is idempotent (leave enable_idempotence=True)")
        if enable_idempotence and acks_value != "all":
            raise ValueError("an idempotent producer needs acks='all' (pass enable_idempotence=False for acks 0/1)")
        if bootstrap is None and zookeeper is None:
            raise ValueError("give bootstrap servers (host:port,...) or a ZooKeeper connect string")
        if audit and audit_interval_s <= 0:
            raise ValueError(f"audit_interval_s must be positive, not {audit_interval_s}")
        if bootstrap is None:
            bootstrap, brokers = discover(zookeeper, security_protocol=client_config.security_protocol)
            if datacenter is None:
                datacenter = next((b.datacenter for b in brokers.values() if b.datacenter), "")
        self.bootstrap = bootstrap
        self.application = application
        self.host = socket.gethostname()
        self._headers = [(HOST_HEADER, self.host.encode())]
        config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "client.id": application,
            "acks": acks_value,
            "linger.ms": linger_ms,
            "batch.size": batch_size,
            "compression.type": compression,
            "partitioner": PARTITIONERS[partitioner],
            "enable.idempotence": enable_idempotence,
            "message.timeout.ms": delivery_timeout_ms,
            "queue.buffering.max.messages": queue_max_messages,
            "error_cb": _log_error,
            "logger": rdlog,  # librdkafka's own log lines go to Python logging (rate-limited), not to stderr
        }
        config.update(client_config.librdkafka())
        if retries is not None:
            config["retries"] = retries
        if transactional_id is not None:
            config["transactional.id"] = transactional_id
            config["transaction.timeout.ms"] = transaction_timeout_ms
            config["message.timeout.ms"] = min(delivery_timeout_ms, transaction_timeout_ms)  # librdkafka's rule
        for name, value in overrides.items():  # librdkafka properties, with '_' for '.'
            config[name.replace("_", ".")] = value
        try:
            self._rd = _RdProducer(config)
        except Exception as exc:  # KafkaException on a bad property
            raise ClientError(f"cannot create producer: {exc}") from exc
        self._produce = self._rd.produce
        self.counter: AuditCounter | None = None
        self.publisher: AuditPublisher | None = None
        self._count_cb: DeliveryCallback | None = None
        self.transactional = transactional_id is not None
        self._txn_counter: AuditCounter | None = None  # the open transaction's deliveries, counted on commit
        self._poll_lock = threading.Lock()  # transactional: no delivery callback runs while a commit settles
        self._audit_producer: Producer | None = None
        if audit:
            self.counter = AuditCounter(audit_tier, application, datacenter or "", self.host)
            self._count_cb = self.counter.on_delivery
            if self.transactional:
                self._txn_counter = AuditCounter(audit_tier, application, datacenter or "", self.host)
                self._count_cb = self._txn_counter.on_delivery
                self._audit_producer = Producer(bootstrap, application=application, datacenter=datacenter,
                                                audit=False, linger_ms=linger_ms, compression=compression,
                                                client_config=client_config)
        self._closed = False
        self._stop_polling = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="ferry-producer-poll", daemon=True)
        self._poller.start()
        if audit:
            sender = self if self._audit_producer is None else self._audit_producer  # (a Producer has __len__)
            self.publisher = AuditPublisher(sender, self.counter, audit_interval_s).start()

    # -- sending -----------------------------------------------------------------------------------------
    def send(self, topic: str, value: bytes | None, key: bytes | None = None, *, partition: int | None = None,
             timestamp_ms: int | None = None, headers: dict[str, bytes] | None = None,
             on_delivery: DeliveryCallback | None = None) -> None:
        """Queue one message (asynchronous; librdkafka batches it). Blocks while the local queue is full."""
        if self._closed:
            raise ProducerClosedError("producer is closed")
        cb = self._count_cb if topic != AUDIT_TOPIC else None
        if on_delivery is not None:
            cb = _chain(cb, on_delivery)
        hdrs = self._headers if headers is None else self._merge_headers(headers)
        part = -1 if partition is None else partition
        ts = timestamp_ms or 0
        try:
            self._produce(topic, value, key, part, cb, None, ts, hdrs)
        except BufferError:
            self._produce_when_room(topic, value, key, part, cb, ts, hdrs)

    def send_message_set(self, topic: str, messages: Iterable[bytes | Message]) -> int:
        """The paper's API: send a set of messages to a topic; returns how many were queued."""
        produce, hdrs_default = self._produce, self._headers
        cb = self._count_cb if topic != AUDIT_TOPIC else None
        n = 0
        for m in messages:
            if isinstance(m, bytes | bytearray | memoryview):
                try:
                    produce(topic, m, None, -1, cb, None, 0, hdrs_default)
                except BufferError:
                    self._produce_when_room(topic, m, None, -1, cb, 0, hdrs_default)
            else:
                self.send(topic, m.value, m.key, partition=m.partition, timestamp_ms=m.timestamp_ms,
                          headers=m.headers)
            n += 1
        return n

    def _produce_when_room(self, topic, value, key, part, cb, ts, hdrs) -> None:
        if self._closed:
            raise ProducerClosedError("producer is closed")
        while True:
            self._rd.poll(0.05)  # serve delivery reports here too, so the queue drains
            try:
                self._produce(topic, value, key, part, cb, None, ts, hdrs)
                return
            except BufferError:
                if self._closed:
                    raise ProducerClosedError("producer closed while waiting for room in its queue") from None

    def _merge_headers(self, headers: dict[str, bytes]) -> list[tuple[str, bytes]]:
        out = list(headers.items())
        if HOST_HEADER not in headers:
            out.extend(self._headers)
        return out

    def partitions_for(self, topic: str, timeout: float = 10.0) -> list[int]:
        """The topic's partitions from the brokers' metadata; UnknownTopicError if it does not exist."""
        md = list_topics(self._rd, self.bootstrap, topic, timeout)  # BrokerUnavailableError: no broker answered
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise UnknownTopicError(f"topic {topic!r} does not exist (create it with `ferry topics create`)")
        return sorted(t.partitions)

    # -- transactions (librdkafka's API; docs/transactions.md) -----------------------------------------------
    def init_transactions(self, timeout: float = 30.0) -> None:
        """Register the transactional id with its coordinator (fences older producers with the same id)."""
        self._rd.init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._rd.begin_transaction()

    def send_offsets_to_transaction(self, offsets: list, group_metadata: object, timeout: float = 30.0) -> None:
        """Commit a consumer's positions (``consumer.position(...)``, ``consumer.consumer_group_metadata()``)
        within the transaction: they become the group's committed offsets exactly when it commits."""
        self._rd.send_offsets_to_transaction(offsets, group_metadata, timeout)

    def commit_transaction(self, timeout: float = 30.0) -> None:
        """Flush and commit; the transaction's messages join the audit counts only now."""
        self._rd.commit_transaction(timeout)
        self._settle_txn_counts(commit=True)

    def abort_transaction(self, timeout: float = 30.0) -> None:
        """Abort: read_committed consumers never see the transaction's messages, and they are not audited."""
        self._rd.abort_transaction(timeout)
        self._settle_txn_counts(commit=False)

    def _settle_txn_counts(self, commit: bool) -> None:
        pending = self._txn_counter
        if pending is None or self.counter is None:
            return
        with self._poll_lock:  # every delivery report of the transaction has been served (flushed by librdkafka)
            events = pending.snapshot_and_reset()
        if commit:
            for e in events:
                self.counter.count(e.topic, e.bucket_start, e.count)

    # -- delivery ----------------------------------------------------------------------------------------
    def _poll_loop(self) -> None:
        poll = self._rd.poll
        lock = self._poll_lock if self.transactional else None
        while not self._stop_polling.is_set():
            try:
                if lock is None:
                    poll(0.1)
                else:
                    with lock:
                        poll(0.1)
            except Exception:  # an exception raised by a user's delivery callback
                log.exception("delivery callback failed")

    def poll(self, timeout: float = 0) -> int:
        """Serve delivery callbacks now (the background thread does it anyway)."""
        return self._rd.poll(timeout)

    def flush(self, timeout: float = 30.0) -> int:
        """Wait until queued messages are delivered or failed; returns how many are still undelivered."""
        return self._rd.flush(timeout)

    def __len__(self) -> int:
        return len(self._rd)

    @property
    def delivered(self) -> int:
        """Messages acknowledged so far (counted by the audit counter; 0 when audit is off)."""
        return self.counter.delivered if self.counter else 0

    @property
    def failed(self) -> int:
        return self.counter.failed if self.counter else 0

    def close(self, timeout: float = 30.0) -> int:
        """Flush, publish the final audit counts, stop; returns the number of undelivered messages."""
        if self._closed:
            return 0
        deadline = time.monotonic() + timeout
        left = self._rd.flush(timeout)
        if self.publisher is not None:
            try:
                self.publisher.close(max(deadline - time.monotonic(), 1.0))
            except Exception:  # closing must still stop the threads and the client
                log.exception("publishing the final audit counts failed")
        if self._audit_producer is not None:
            self._audit_producer.close(max(deadline - time.monotonic(), 1.0))
        self._closed = True
        self._stop_polling.set()
        self._poller.join(5)
        left = self._rd.flush(max(deadline - time.monotonic(), 0.5))
        if left:
            log.error("producer closed with %d undelivered messages", left)
            self._rd.purge()  # so that close() does not wait for them again
            self._rd.flush(0)
        close = getattr(self._rd, "close", None)
        if close is not None:
            try:
                close()
            except Exception as exc:  # closing must not raise
                log.debug("closing librdkafka producer: %s", exc)
        return left

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chain(first: DeliveryCallback | None, second: DeliveryCallback) -> DeliveryCallback:
    if first is None:
        return second

    def both(err, msg) -> None:
        first(err, msg)
        second(err, msg)
    return both


def _log_error(err) -> None:
    rdlog.warning("producer: %s", err)
