"""ConsumerStreams: the KafkaStreams a ConsumerConnector hands to its application, and which partition feeds which."""

from __future__ import annotations

from ferry.client.kafka_stream import KafkaStream

TopicPartitionKey = tuple[str, int]


class ConsumerStreams:
    """Per topic n streams (``create_message_streams``) or n streams shared by every topic of a filter
    (``create_message_streams_by_filter``). A partition always feeds the same stream while it is owned, so
    its messages come out in offset order."""

    def __init__(self, queued_max_chunks: int, consumer_timeout_s: float | None) -> None:
        self.queued_max_chunks = queued_max_chunks
        self.consumer_timeout_s = consumer_timeout_s
        self.by_topic: dict[str, list[KafkaStream]] = {}
        self.shared: list[KafkaStream] = []  # a filter's

    def create_per_topic(self, topic_count: dict[str, int]) -> dict[str, list[KafkaStream]]:
        self.by_topic = {t: [self._new() for _ in range(n)] for t, n in topic_count.items()}
        return {t: list(s) for t, s in self.by_topic.items()}

    def create_shared(self, n: int) -> list[KafkaStream]:
        self.shared = [self._new() for _ in range(n)]
        return list(self.shared)

    def _new(self) -> KafkaStream:
        return KafkaStream(self.queued_max_chunks, self.consumer_timeout_s)

    def all(self) -> list[KafkaStream]:
        return [s for streams in self.by_topic.values() for s in streams] + self.shared

    def clear(self) -> None:
        """Drop every queued chunk (of partitions that may no longer be ours)."""
        for s in self.all():
            s.clear()

    def shut_down(self) -> None:
        """End the application's iteration."""
        for s in self.all():
            s.shut_down()

    def assign(self, share: list[TopicPartitionKey]) -> dict[TopicPartitionKey, KafkaStream]:
        """Which stream each partition of ``share`` feeds: dealt round-robin over the filter's streams, or
        over its topic's streams in the order of the share."""
        out: dict[TopicPartitionKey, KafkaStream] = {}
        if self.shared:
            for i, key in enumerate(share):
                out[key] = self.shared[i % len(self.shared)]
            return out
        per_topic: dict[str, int] = {}
        for key in share:
            i = per_topic.get(key[0], 0)
            per_topic[key[0]] = i + 1
            streams = self.by_topic[key[0]]
            out[key] = streams[i % len(streams)]
        return out
