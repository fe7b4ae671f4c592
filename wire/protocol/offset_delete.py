"""OffsetDelete (key 47), version 0 (KIP-496): remove a group's committed offsets of some partitions, e.g. of a
topic the group stopped consuming. The group must be empty, or not subscribed to the topic
(GROUP_SUBSCRIBED_TO_TOPIC per partition otherwise), as Kafka's coordinator rules."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(frozen=True)
class OffsetDeleteRequest:
    group_id: str
    topics: list[tuple[str, list[int]]]


def parse_request(r: Reader, version: int) -> OffsetDeleteRequest:
    return OffsetDeleteRequest(r.string(), r.topic_partition_ids())


def encode_response(version: int, error_code: int, topics: list[tuple[str, list[tuple[int, int]]]]) -> bytes:
    """``error_code``: the group's; ``topics``: [(topic, [(partition, error_code)])]."""
    return Writer().error_code(error_code).int32(0).partition_errors(topics).getvalue()
