"""ListOffsets (key 2), versions 1-5: timestamp -2 = earliest, -1 = latest, otherwise the first offset whose
batch has a timestamp at or after it."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer

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
