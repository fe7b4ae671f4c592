"""What the offline cluster holds: topics and partitions (ZooKeeper), log start/end offsets and offsets by
time (ListOffsets, through librdkafka's ``get_watermark_offsets`` / ``offsets_for_times``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ferry.client.bootstrap import discover
from ferry.client.topic_selection import TopicSelectionError, select_topics
from ferry.zk import ClusterRegistry


class ClusterOffsetsError(RuntimeError):
    """The cluster could not answer (no brokers, unknown topic, ListOffsets failed)."""


@dataclass(frozen=True)
class Watermarks:
    low: int  # log start offset: the first offset still retained
    high: int  # high watermark: the next offset to be written (what a fetch may read up to)


def consumer_config(bootstrap: str, **extra: object) -> dict[str, object]:
    """librdkafka settings of the planner's watermark reader (ClusterOffsets). ``group.id`` is required by
    confluent-kafka even with assign(); no offsets are ever committed under it."""
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"ferry-load-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "socket.timeout.ms": 30_000,
        "api.version.request.timeout.ms": 10_000,
        "log_level": 3,
    }
    conf.update(extra)
    return conf


class ClusterOffsets:
    """A short-lived view of one cluster (context manager)."""

    def __init__(self, zookeeper: str | None = None, bootstrap: str | None = None, timeout_s: float = 15.0) -> None:
        if zookeeper is None and bootstrap is None:
            raise ValueError("need the cluster's ZooKeeper connect string or bootstrap servers")
        self.zookeeper = zookeeper
        self.timeout_s = timeout_s
        self.bootstrap = bootstrap or discover(zookeeper, timeout=timeout_s)[0]
        self._consumer = Consumer(consumer_config(self.bootstrap))

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> ClusterOffsets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def topics(self) -> dict[str, int]:
        """``{topic: partition count}`` from ZooKeeper (the registry is the truth) or broker metadata."""
        if self.zookeeper:
            with ClusterRegistry(self.zookeeper, timeout=self.timeout_s, create=False) as reg:
                return {name: info.partition_count for name, info in reg.topics().items()}
        md = self._consumer.list_topics(timeout=self.timeout_s)
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def select_topics(self, spec: str | list[str], include_internal: bool = False) -> dict[str, int]:
        """Topics (name -> partition count) that ``spec`` selects (``ferry.client.topic_selection``); named
        topics must exist."""
        available = self.topics()
        try:
            names = select_topics(spec, available, include_internal=include_internal)
        except TopicSelectionError as e:
            raise ClusterOffsetsError(f"{e} in cluster at {self.zookeeper or self.bootstrap}") from None
        return {n: available[n] for n in names}

    def watermarks(self, topic: str, partition: int) -> Watermarks:
        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                             timeout=self.timeout_s, cached=False)
        except KafkaException as e:
            raise ClusterOffsetsError(f"ListOffsets for {topic}/{partition} failed: {e}") from None
        return Watermarks(int(low), int(high))

    def offsets_for_time(self, topic: str, partitions: list[int], ts_ms: int) -> dict[int, int | None]:
        """First offset whose timestamp is >= ts_ms per partition; None when no such message exists yet."""
        tps = [TopicPartition(topic, p, ts_ms) for p in partitions]
        try:
            res = self._consumer.offsets_for_times(tps, timeout=self.timeout_s)
        except KafkaException as e:
            raise ClusterOffsetsError(f"ListOffsets by time for {topic} failed: {e}") from None
        out: dict[int, int | None] = {}
        for tp in res:
            if tp.error is not None:
                raise ClusterOffsetsError(f"ListOffsets by time for {topic}/{tp.partition}: {tp.error}")
            out[tp.partition] = tp.offset if tp.offset >= 0 else None
        return out
