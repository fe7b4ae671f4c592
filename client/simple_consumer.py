"""SimpleConsumer: read partitions directly, without a group (the console consumer without --group, the
audit reconciler, `ferry groups` for log-end offsets and offsets by time).

A thin wrapper over a confluent-kafka Consumer used with ``assign()`` only; partition lists come from
ZooKeeper when a connect string is given, else from the brokers' Metadata.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, TopicPartition

from ferry.client.bootstrap import discover
from ferry.client.broker_metadata import list_topics
from ferry.client.errors import ClientError, UnknownTopicError
from ferry.client.message import MessageAndMetadata
from ferry.client.rate_limited_log import rate_limited_logger
from ferry.client.wire_client import WireClient
from ferry.wire.client_config import ClientConfig
from ferry.wire.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from ferry.zk import TopicInfo, ZkConnect
from ferry.zk import connect as zk_connect
from ferry.zk.znodes import BROKER_TOPICS_PATH, topic_path


class SimpleConsumer:
    def __init__(self, bootstrap: str | None = None, zookeeper: str | None = None, *,
                 client_id: str = "ferry-simple-consumer", timeout_s: float = 10.0,
                 isolation_level: str = "read_committed", client_config: ClientConfig | None = None) -> None:
        """``isolation_level``: read_committed (librdkafka's default: no aborted or still open transaction's
        records) or read_uncommitted (everything up to the high watermark). ``client_config``: TLS/SASL
        (wire/client_config.py) for both the librdkafka consumer and the wire client's ListOffsets."""
        self.client_config = client_config or ClientConfig.plaintext()
        if isolation_level not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"isolation level must be read_committed or read_uncommitted, not {isolation_level!r}")
        if bootstrap is None and zookeeper is None:
            raise ValueError("give bootstrap servers (host:port,...) or a ZooKeeper connect string")
        self.zookeeper = ZkConnect.parse(zookeeper) if zookeeper else None
        if bootstrap is None:
            bootstrap, _ = discover(str(self.zookeeper), timeout_s, self.client_config.security_protocol)
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._wire: WireClient | None = None
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"ferry.{client_id}",  # librdkafka wants one even with assign(); never used
            "client.id": client_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "isolation.level": isolation_level,
            "error_cb": lambda err: None,  # transient broker errors; real failures surface as exceptions
            "logger": rate_limited_logger("ferry.librdkafka"),
            **self.client_config.librdkafka(),
        })

    # -- metadata and offsets -----------------------------------------------------------------------------
    def topics(self) -> list[str]:
        if self.zookeeper is not None:
            zk = zk_connect(self.zookeeper, timeout=self.timeout_s)
            try:
                return sorted(zk.get_children(BROKER_TOPICS_PATH)) if zk.exists(BROKER_TOPICS_PATH) else []
            finally:
                zk.stop()
                zk.close()
        md = list_topics(self._consumer, self.bootstrap, None, self.timeout_s)
        return sorted(md.topics)

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions; UnknownTopicError if it does not exist."""
        if self.zookeeper is not None:
            from kazoo.exceptions import NoNodeError

            zk = zk_connect(self.zookeeper, timeout=self.timeout_s)
            try:
                data, _ = zk.get(topic_path(topic))
                return sorted(TopicInfo.decode(topic, data).partitions)
            except NoNodeError:
                raise UnknownTopicError(f"topic {topic!r} does not exist in {self.zookeeper}") from None
            finally:
                zk.stop()
                zk.close()
        md = list_topics(self._consumer, self.bootstrap, topic, self.timeout_s)
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise UnknownTopicError(f"topic {topic!r} does not exist at {self.bootstrap}")
        return sorted(t.partitions)

    def _offsets(self) -> WireClient:
        """The raw client's one ListOffsets path (shared with the loaders and the mirror)."""
        if self._wire is None:
            self._wire = WireClient(self.bootstrap, client_id="ferry-simple-consumer", timeout_s=self.timeout_s,
                                    connect_timeout_s=min(self.timeout_s, 10.0),
                                    security=self.client_config.security())
        return self._wire

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(earliest offset, log end offset) — ListOffsets earliest/latest."""
        key = (topic, partition)
        try:
            low = self._offsets().offsets({key: EARLIEST_TIMESTAMP})[key]
            high = self._offsets().offsets({key: LATEST_TIMESTAMP})[key]
        except ClientError as exc:
            raise ClientError(f"cannot list offsets of {topic}/{partition}: {exc}") from None
        return low, high

    def offsets_for_time(self, topic: str, partitions: list[int], ts_ms: int) -> dict[int, int]:
        """Per partition, the first offset whose timestamp is >= ts_ms (the log end if there is none)."""
        try:
            found = self._offsets().offsets({(topic, p): ts_ms for p in partitions})
        except ClientError as exc:
            raise ClientError(f"cannot look up offsets by time in {topic}: {exc}") from None
        return {p: off if off >= 0 else self.watermarks(topic, p)[1] for (_, p), off in found.items()}

    # -- reading --------------------------------------------------------------------------------------------
    def read(self, topic: str, start: str | dict[int, int] = "earliest", *, partitions: list[int] | None = None,
             until_end: bool = True, max_messages: int | None = None,
             idle_timeout_s: float | None = None) -> Iterator[MessageAndMetadata]:
        """Messages of ``topic`` from ``start`` ("earliest", "latest" or {partition: offset}).

        ``until_end``: stop at the log end offsets seen when reading began; otherwise keep following.
        ``idle_timeout_s``: stop after that long without a message (with ``until_end``, that is an error:
        ClientError, rather than a silently short read). Ordered within each partition.
        """
        parts = partitions if partitions is not None else self.partitions(topic)
        begin: dict[int, int] = {}
        end: dict[int, int] = {}
        for p in parts:
            low, high = self.watermarks(topic, p)
            if isinstance(start, dict):
                begin[p] = min(max(start.get(p, low), low), high)
            else:
                begin[p] = low if start == "earliest" else high
            end[p] = high
        todo = {p for p in parts if begin[p] < end[p]} if until_end else set(parts)
        if not todo:
            return
        self._consumer.assign([TopicPartition(topic, p, begin[p]) for p in parts])
        n = 0
        last_message = time.monotonic()
        try:
            while todo:
                msgs = self._consumer.consume(1000, 0.2)
                if not msgs:
                    if idle_timeout_s is not None and time.monotonic() - last_message > idle_timeout_s:
                        if until_end:
                            raise ClientError(f"reading {topic}: no message for {idle_timeout_s:g} s before the "
                                              f"end of partition(s) {sorted(todo)}")
                        return
                    continue
                last_message = time.monotonic()
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        if err.fatal() or err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
                            raise ClientError(f"reading {topic}: {err}")
                        continue
                    p, off = m.partition(), m.offset()
                    if until_end:
                        if p not in todo or off >= end[p]:
                            continue
                    yield MessageAndMetadata(m.topic(), p, off, m.key(), m.value(), m.timestamp()[1], m.headers())
                    n += 1
                    if max_messages is not None and n >= max_messages:
                        return
                    if until_end and off + 1 >= end[p]:
                        todo.discard(p)
        finally:
            self._consumer.unassign()

    def close(self) -> None:
        self._consumer.close()
        if self._wire is not None:
            self._wire.close()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
