"""PartitionTopicInfo: one owned partition during one ownership period (as in Kafka 0.8).

A fresh object is made at every claim; at release it is invalidated, so chunks still queued or half
iterated from the previous period are dropped instead of being delivered out of turn or committed.
"""

from __future__ import annotations

from ferry.client.kafka_stream import KafkaStream


class PartitionTopicInfo:
    __slots__ = ("topic", "partition", "stream", "fetch_offset", "consumed_offset", "committed_offset", "valid")

    def __init__(self, topic: str, partition: int, stream: KafkaStream, fetch_offset: int | None) -> None:
        self.topic = topic
        self.partition = partition
        self.stream = stream  # the KafkaStream its messages go to
        self.fetch_offset = fetch_offset  # where fetching starts (None = auto_offset_reset), then the next expected
        self.consumed_offset = fetch_offset  # next offset after the last message handed to the application
        self.committed_offset = fetch_offset  # what ZooKeeper holds
        self.valid = True

    def __repr__(self) -> str:
        return (f"PartitionTopicInfo({self.topic}/{self.partition} fetch={self.fetch_offset} "
                f"consumed={self.consumed_offset} committed={self.committed_offset} valid={self.valid})")
