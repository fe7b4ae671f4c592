"""Fetcher: one thread and one confluent-kafka Consumer fetching the partitions a consumer owns.

The Consumer is used with ``assign()`` at explicit offsets only: the paper's groups are coordinated through
ZooKeeper, not by the broker's group coordinator, and their offsets live in ZooKeeper (so librdkafka's own
commits are off; it still insists on a ``group.id``).
Only the fetch thread touches the Consumer. The connector drives it with two calls: ``stop_fetching()``
(returns once the thread has dropped whatever it held and unassigned) and ``start_fetching(infos)``.
Every blocking step of the thread is short, so a rebalance never waits long for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from ferry.client.partition_topic_info import PartitionTopicInfo
from ferry.client.rate_limited_log import rate_limited_logger
from ferry.wire.client_config import ClientConfig

log = logging.getLogger("ferry.fetcher")
rdlog = rate_limited_logger("ferry.librdkafka")

_RESOLVE_TIMEOUT_S = 3.0


class Fetcher:
    def __init__(self, group: str, client_id: str, bootstrap: Callable[[], str], auto_offset_reset: str = "earliest",
                 max_chunk: int = 1000, overrides: dict[str, object] | None = None,
                 client_config: ClientConfig | None = None) -> None:
        """``client_config``: TLS/SASL (librdkafka properties) for the consumer; ``overrides`` go on top."""
        if auto_offset_reset not in ("earliest", "latest"):
            raise ValueError(f"auto_offset_reset must be 'earliest' or 'latest', not {auto_offset_reset!r}")
        self._overrides = {**(client_config or ClientConfig.plaintext()).librdkafka(), **(overrides or {})}
        self.group = group
        self.client_id = client_id
        self._bootstrap = bootstrap
        self.auto_offset_reset = auto_offset_reset
        self.max_chunk = max_chunk
        self._consumer: Consumer | None = None
        self._cond = threading.Condition()
        self._gen = 0
        self._acked_gen = 0
        self._infos: list[PartitionTopicInfo] | None = None
        self._closed = False
        self._error_logged: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name=f"ferry-fetcher-{client_id}", daemon=True)
        self._thread.start()

    # -- control (called by the connector's thread) -------------------------------------------------------
    def start_fetching(self, infos: list[PartitionTopicInfo]) -> None:
        with self._cond:
            self._gen += 1
            self._infos = list(infos)
            self._cond.notify_all()

    def stop_fetching(self, timeout: float = 30.0) -> None:
        """Stop and wait until no message of the current assignment can reach a stream any more."""
        with self._cond:
            self._gen += 1
            gen = self._gen
            self._infos = None
            self._cond.notify_all()
            deadline = time.monotonic() + timeout
            while self._acked_gen < gen and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"fetcher did not stop within {timeout:g} s")
                self._cond.wait(left)

    def close(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._closed = True
            self._gen += 1
            self._infos = None
            self._cond.notify_all()
        self._thread.join(timeout)

    # -- the fetch thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        applied = 0
        pending: list[PartitionTopicInfo] | None = None
        routes: dict[tuple[str, int], PartitionTopicInfo] | None = None
        try:
            while True:
                with self._cond:
                    if self._closed:
                        break
                    gen, infos = self._gen, self._infos
                if gen != applied:
                    routes = None
                    self._unassign()
                    with self._cond:
                        self._acked_gen = max(self._acked_gen, gen)
                        self._cond.notify_all()
                    applied, pending = gen, infos
                    continue
                if routes is None:
                    if pending:
                        routes = self._assign(pending, gen)
                    if routes is None:
                        with self._cond:
                            if self._gen == gen and not self._closed:
                                self._cond.wait(0.5)
                    continue
                self._fetch_once(routes, gen)
        except Exception:
            log.exception("fetcher %s died", self.client_id)
        finally:
            with self._cond:
                self._acked_gen = self._gen
                self._cond.notify_all()
            if self._consumer is not None:
                try:
                    self._consumer.close()
                except Exception as exc:
                    log.debug("closing consumer: %s", exc)

    def _fetch_once(self, routes: dict[tuple[str, int], PartitionTopicInfo], gen: int) -> None:
        assert self._consumer is not None
        msgs = self._consumer.consume(self.max_chunk, 0.1)
        if not msgs:
            return
        chunks: dict[tuple[str, int], list] = {}
        for m in msgs:
            if m.error() is not None:
                self._on_error(m.error(), m.topic(), m.partition())
                continue
            key = (m.topic(), m.partition())
            chunk = chunks.get(key)
            if chunk is None:
                chunk = chunks[key] = []
            chunk.append(m)
        for key, chunk in chunks.items():
            info = routes.get(key)
            if info is None:
                continue
            expected = info.fetch_offset
            if expected is not None and chunk[0].offset() < expected:  # a stale fetch from before a seek
                chunk = [m for m in chunk if m.offset() >= expected]
                if not chunk:
                    continue
            info.fetch_offset = chunk[-1].offset() + 1
            while not info.stream.put(info, chunk, 0.1):
                if self._gen != gen:
                    return  # superseded: drop; the next owner fetches them again from the consumed offset

    def _ensure_consumer(self) -> Consumer | None:
        if self._consumer is not None:
            return self._consumer
        bootstrap = self._bootstrap()
        if not bootstrap:
            return None
        config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "group.id": f"ferry.{self.group}",  # required by librdkafka even with assign(); never used
            "client.id": self.client_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": self.auto_offset_reset,
            "fetch.wait.max.ms": 100,
            "error_cb": self._on_client_error,
            "logger": rdlog,
        }
        config.update(self._overrides)
        self._consumer = Consumer(config)
        return self._consumer

    def _assign(self, infos: list[PartitionTopicInfo], gen: int) -> dict[tuple[str, int], PartitionTopicInfo] | None:
        consumer = self._ensure_consumer()
        if consumer is None:
            return None
        tps = []
        for info in infos:
            if self._gen != gen:
                return None
            tps.append(TopicPartition(info.topic, info.partition, self._resolve(consumer, info)))
        consumer.assign(tps)
        log.debug("%s fetching %s", self.client_id, [(tp.topic, tp.partition, tp.offset) for tp in tps])
        return {(i.topic, i.partition): i for i in infos}

    def _resolve(self, consumer: Consumer, info: PartitionTopicInfo) -> int:
        """The stored offset if the log still has it; else earliest/latest (which becomes the new
        consumed offset, so the next commit records the group's position)."""
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(info.topic, info.partition),
                                                       timeout=_RESOLVE_TIMEOUT_S, cached=False)
        except KafkaException as exc:
            log.warning("%s: cannot list offsets of %s/%d (%s); librdkafka will apply auto.offset.reset",
                        self.client_id, info.topic, info.partition, exc)
            if info.fetch_offset is not None:
                return info.fetch_offset
            return OFFSET_BEGINNING if self.auto_offset_reset == "earliest" else OFFSET_END
        if info.fetch_offset is not None and low <= info.fetch_offset <= high:
            return info.fetch_offset
        new = low if self.auto_offset_reset == "earliest" else high
        if info.fetch_offset is not None:
            log.warning("%s: committed offset %d of %s/%d is outside [%d, %d]; starting at %s offset %d",
                        self.client_id, info.fetch_offset, info.topic, info.partition, low, high,
                        self.auto_offset_reset, new)
        info.fetch_offset = info.consumed_offset = new
        return new

    def _unassign(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.unassign()
            except KafkaException as exc:
                log.debug("unassign: %s", exc)

    def _on_error(self, err: KafkaError, topic: str | None, partition: int | None) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        self._log_limited(f"{topic}/{partition}: {err}")

    def _on_client_error(self, err: KafkaError) -> None:
        self._log_limited(str(err))

    def _log_limited(self, text: str) -> None:
        now = time.monotonic()
        if now - self._error_logged.get(text, 0.0) > 30.0:
            self._error_logged[text] = now
            log.warning("fetcher %s: %s", self.client_id, text)
