"""ListOffsets (key 2), versions 1-5: timestamp -2 = earliest, -1 = latest, otherwise the first offset whose
batch has a timestamp at or after it. The client side (`encode_request`, `parse_response`) speaks v5."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.fetch import CONSUMER_REPLICA_ID, READ_COMMITTED, READ_UNCOMMITTED
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer

REQUEST_VERSION = 5  # what clients send

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


@dataclass(slots=True)
class ListOffsetsRequest:
    replica_id: int
    isolation_level: int
    topics: list[tuple[str, list[tuple[int, int]]]]  # [(topic, [(partition, timestamp)])]


def parse_request(r: Reader, version: int) -> ListOffsetsRequest:
    replica_id = r.int32()
    isolation = r.int8() if version >= 2 else 0

    def partition(r: Reader) -> tuple[int, int]:
        p = r.int32()
        if version >= 4:
            r.int32()  # current_leader_epoch
        return p, r.int64()

    return ListOffsetsRequest(replica_id, isolation, r.array(lambda r: (r.string(), r.array(partition))))


@dataclass(slots=True)
class PartitionOffsetResult:
    partition: int
    error_code: int = 0
    timestamp: int = -1
    offset: int = -1


def encode_response(version: int, topics: list[tuple[str, list[PartitionOffsetResult]]]) -> bytes:
    w = Writer()
    if version >= 2:
        w.int32(0)  # throttle_time_ms
    w.array_len(len(topics))
    for name, parts in topics:
        w.string(name).array_len(len(parts))
        for p in parts:
            w.int32(p.partition).int16(p.error_code).int64(p.timestamp).int64(p.offset)
            if version >= 4:
                w.int32(0 if p.offset >= 0 else -1)  # leader_epoch
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side


def encode_request(topics: Iterable[tuple[str, Sequence[tuple[int, int]]]], read_committed: bool = False
                   ) -> tuple[int, int, Buffers]:
    """ListOffsets v5: [(topic, [(partition, timestamp)])]; timestamp -2 earliest, -1 latest (read_committed:
    the last stable offset)."""
    topics = list(topics)
    isolation = READ_COMMITTED if read_committed else READ_UNCOMMITTED
    w = Writer().int32(CONSUMER_REPLICA_ID).int8(isolation).array_len(len(topics))
    for name, partitions in topics:
        w.string(name).array_len(len(partitions))
        for partition, timestamp in partitions:
            w.int32(partition).int32(-1).int64(timestamp)  # current_leader_epoch unknown
    return ApiKey.LIST_OFFSETS, REQUEST_VERSION, [w.buf]


def parse_response(body: memoryview, version: int = REQUEST_VERSION) -> dict[str, list[PartitionOffsetResult]]:
    """A ListOffsets answer (after the correlation id): {topic: [PartitionOffsetResult]}."""
    r = Reader(body)
    if version >= 2:
        r.int32()  # throttle
    out: dict[str, list[PartitionOffsetResult]] = {}
    for _ in range(max(r.array_len(), 0)):
        name = r.string()
        results = out.setdefault(name, [])
        for _ in range(max(r.array_len(), 0)):
            partition, err, ts, offset = r.int32(), r.int16(), r.int64(), r.int64()
            if version >= 4:
                r.int32()  # leader epoch
            results.append(PartitionOffsetResult(partition, err, ts, offset))
    return out
