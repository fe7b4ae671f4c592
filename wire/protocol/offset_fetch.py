"""OffsetFetch (key 9), versions 0-5 (v6+ is flexible).

v2 allows a null topic list (every partition the group has offsets for) and adds a top-level error code, v3
the throttle time, v5 each partition's committed leader epoch. A partition without a committed offset
answers offset -1 with no error, as Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class OffsetFetchRequest:
    group_id: str
    topics: list[tuple[str, list[int]]] | None  # None: everything the group committed (v2+)


def parse_request(r: Reader, version: int) -> OffsetFetchRequest:
    group_id = r.string()
    item = lambda r: (r.string(), r.int32_array())  # noqa: E731
    topics = r.nullable_array(item) if version >= 2 else r.array(item)
    return OffsetFetchRequest(group_id, topics)


@dataclass(slots=True, frozen=True)
class FetchedOffset:
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str | None = ""
    error_code: int = 0


def encode_response(version: int, topics: list[tuple[str, list[FetchedOffset]]], error_code: int = 0) -> bytes:
    def partition(w: Writer, p: FetchedOffset) -> None:
        w.int32(p.partition).int64(p.offset)
        if version >= 5:
            w.int32(p.leader_epoch)
        w.string(p.metadata).error_code(p.error_code)

    w = Writer()
    if version >= 3:
        w.int32(0)  # throttle_time_ms
    w.topic_array(topics, partition)
    if version >= 2:
        w.error_code(error_code)
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side


def encode_zookeeper_group_request(group: str, topics: list[tuple[str, list[int]]]) -> tuple[int, int, Buffers]:
    """OffsetFetch v0: Kafka 0.8.1's read of a group's offsets kept in ZooKeeper (the paper's groups)."""
    w = Writer().string(group).array_len(len(topics))
    for name, parts in topics:
        w.string(name).array_len(len(parts))
        for p in parts:
            w.int32(p)
    return ApiKey.OFFSET_FETCH, 0, [w.buf]


def parse_response(body: memoryview, version: int = 0) -> dict[str, list[FetchedOffset]]:
    """An OffsetFetch answer (after the correlation id), versions 0-1: {topic: [FetchedOffset]}."""
    def partition(r: Reader) -> FetchedOffset:
        p, offset = r.int32(), r.int64()
        return FetchedOffset(p, offset, metadata=r.nullable_string(), error_code=r.int16())

    if version > 1:
        raise ValueError(f"OffsetFetch v{version} answers are not parsed here")
    return Reader(body).topic_map(partition)
