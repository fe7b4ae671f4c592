"""Fetch (key 1), versions 4-11. Fetch sessions (v7+) are not kept: the answer is always a full response
with session_id 0, which tells the client to send full requests (the broker stays stateless).

The encoder returns a list of parts: `bytes` and record slices (any object with an int `size`), so that
the server writes the framing itself and sends the record bytes with sendfile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class FetchPartition:
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchRequest:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[tuple[str, list[FetchPartition]]]
    rack_id: str = ""


def parse_request(r: Reader, version: int) -> FetchRequest:
    replica_id = r.int32()
    max_wait = r.int32()
    min_bytes = r.int32()
    max_bytes = r.int32()  # v3+
    isolation = r.int8()  # v4+
    session_id, epoch = (r.int32(), r.int32()) if version >= 7 else (0, -1)

    def partition(r: Reader) -> FetchPartition:
        p = r.int32()
        leader_epoch = r.int32() if version >= 9 else -1
        offset = r.int64()
        log_start = r.int64() if version >= 5 else -1
        return FetchPartition(p, offset, r.int32(), leader_epoch, log_start)

    topics = r.array(lambda r: (r.string(), r.array(partition)))
    if version >= 7:
        r.array(lambda r: (r.string(), r.int32_array()))  # forgotten topics: meaningless without sessions
    rack = r.string() if version >= 11 else ""
    return FetchRequest(replica_id, max_wait, min_bytes, max_bytes, isolation, session_id, epoch, topics, rack)


@dataclass(slots=True)
class PartitionFetchResult:
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = None  # None, bytes, or a slice with `.size` sent by the server (sendfile)


def encode_response(version: int, topics: list[tuple[str, list[PartitionFetchResult]]],
                    error_code: int = 0) -> list[Any]:
    parts: list[Any] = []
    w = Writer().int32(0)  # throttle_time_ms
    if version >= 7:
        w.int16(error_code).int32(0)  # error_code, session_id (no session)
    w.array_len(len(topics))
    for name, results in topics:
        w.string(name).array_len(len(results))
        for p in results:
            w.int32(p.partition).int16(p.error_code).int64(p.high_watermark).int64(p.last_stable_offset)
            if version >= 5:
                w.int64(p.log_start_offset)
            w.array_len(-1)  # aborted_transactions: none (no transactions)
            if version >= 11:
                w.int32(-1)  # preferred_read_replica
            rec = p.records
            if rec is None:
                w.int32(-1)
            elif isinstance(rec, bytes | bytearray | memoryview):
                w.bytes_(rec)
            else:
                w.int32(rec.size)
                parts.append(bytes(w.buf))
                parts.append(rec)
                w = Writer()
    if w.buf:
        parts.append(bytes(w.buf))
    return parts


def parts_size(parts: list[Any]) -> int:
    return sum(len(p) if isinstance(p, bytes | bytearray | memoryview) else p.size for p in parts)
