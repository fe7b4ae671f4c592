"""OffsetCommit (key 8), versions 0-7 (v8+ is flexible).

v1 adds the generation and member id (and a per-partition commit timestamp, v1 only), v2-4 a retention time
(ignored: see docs/groups.md), v3 the response's throttle time, v6 each partition's leader epoch, v7
group.instance.id. Generation -1 with an empty member id is a commit from outside the group protocol (a
consumer that assigns its partitions itself, an admin tool): accepted only while the group has no members.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class OffsetCommitRequest:
    """A member's (or, generation -1, an outside committer's) offsets for the group."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    topics: list[tuple[str, list[CommittedPartition]]]


@dataclass(slots=True, frozen=True)
class CommittedPartition:
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


def parse_request(r: Reader, version: int) -> OffsetCommitRequest:
    group_id = r.string()
    generation = r.int32() if version >= 1 else -1
    member_id = r.string() if version >= 1 else ""
    instance_id = r.nullable_string() if version >= 7 else None
    if 2 <= version <= 4:
        r.int64()  # retention_time_ms

    def partition(r: Reader) -> CommittedPartition:
        p = r.int32()
        offset = r.int64()
        epoch = r.int32() if version >= 6 else -1
        if version == 1:
            r.int64()  # commit_timestamp
        return CommittedPartition(p, offset, epoch, r.nullable_string())

    topics = r.topic_array(partition)
    return OffsetCommitRequest(group_id, generation, member_id, instance_id, topics)


def encode_response(version: int, topics: list[tuple[str, list[tuple[int, int]]]]) -> bytes:
    """``topics``: [(topic, [(partition, error_code)])]."""
    w = Writer()
    if version >= 3:
        w.int32(0)  # throttle_time_ms
    return bytes(w.partition_errors(topics).buf)


# ---------------------------------------------------------------------- client side
CLIENT_VERSION = 2


def encode_request(group_id: str, offsets: dict[tuple[str, int], int], generation_id: int = -1,
                   member_id: str = "") -> tuple[int, int, list]:
    """OffsetCommit v2; generation -1 and no member id: a commit from outside the group protocol (admin)."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append((partition, offset))
    w = Writer().string(group_id).int32(generation_id).string(member_id).int64(-1)
    return ApiKey.OFFSET_COMMIT, CLIENT_VERSION, [w.topic_array(list(by_topic.items()), _commit_offset).buf]


def _commit_offset(w: Writer, partition_offset: tuple[int, int]) -> None:
    partition, offset = partition_offset
    w.int32(partition).int64(offset).string("")  # no metadata


def parse_response(body: memoryview | bytes) -> dict[tuple[str, int], int]:
    """{(topic, partition): error_code} of a v2 answer."""
    return Reader(body).partition_errors()
