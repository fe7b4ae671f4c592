"""Fetch (key 1), versions 4-11. Fetch sessions (v7+) are not kept: the answer is always a full response
with session_id 0, which tells the client to send full requests (the broker stays stateless).

The encoder returns a list of parts: `bytes` and record slices (any object with an int `size`), so that
the server writes the framing itself and sends the record bytes with sendfile.

The client side (`encode_request`, `parse_response`) speaks v11 and is used by every raw fetcher (the
mirror, a broker's replica fetcher): fetched records come back as memoryviews into the response buffer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer

REQUEST_VERSION = 11  # what clients send
CONSUMER_REPLICA_ID = -1  # a Fetch/ListOffsets from a client, not a follower
READ_UNCOMMITTED = 0
READ_COMMITTED = 1  # isolation_level: only up to the last stable offset, aborted transactions listed


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

    topics = r.topic_array(partition)
    if version >= 7:
        r.topic_partition_ids()  # forgotten topics: meaningless without sessions
    rack = r.string() if version >= 11 else ""
    return FetchRequest(replica_id, max_wait, min_bytes, max_bytes, isolation, session_id, epoch, topics, rack)


@dataclass(slots=True)
class PartitionFetchResult:
    partition: int
    error_code: int = int(ErrorCode.NONE)
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = None  # None, bytes, or a slice with `.size` sent by the server (sendfile)
    # read_committed: [(producer id, first offset)] of the aborted transactions in the fetched range
    aborted_transactions: list[tuple[int, int]] | None = None


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
            aborted = p.aborted_transactions
            if aborted is None:
                w.array_len(-1)
            else:
                w.array_len(len(aborted))
                for pid, first in aborted:
                    w.int64(pid).int64(first)
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


# ---------------------------------------------------------------------- client side


def encode_request(topics: Iterable[tuple[str, Sequence[FetchPartition]]], max_wait_ms: int, min_bytes: int,
                   max_bytes: int, replica_id: int = CONSUMER_REPLICA_ID,
                   isolation_level: int = READ_UNCOMMITTED) -> tuple[int, int, Buffers]:
    """Fetch v11, full request without a fetch session (session id 0, epoch -1); a follower passes its
    broker id as ``replica_id`` (it then reads up to the leader's log end, not the high watermark)."""
    topics = list(topics)
    w = Writer().int32(replica_id).int32(max_wait_ms).int32(min_bytes).int32(max_bytes)
    w.int8(isolation_level).int32(0).int32(-1)
    w.array_len(len(topics))
    for name, parts in topics:
        w.string(name).array_len(len(parts))
        for p in parts:
            w.int32(p.partition).int32(p.current_leader_epoch).int64(p.fetch_offset)
            w.int64(p.log_start_offset).int32(p.max_bytes)
    w.array_len(0)  # forgotten topics
    w.string("")  # rack id
    return ApiKey.FETCH, REQUEST_VERSION, [w.buf]


@dataclass(slots=True)
class FetchResponse:
    error_code: int
    topics: dict[str, list[PartitionFetchResult]]


def parse_response(body: memoryview, version: int = REQUEST_VERSION) -> FetchResponse:
    """A Fetch answer (after the correlation id); each partition's records are a memoryview into ``body``."""
    def partition(r: Reader) -> PartitionFetchResult:
        partition, err, hw = r.int32(), r.int16(), r.int64()
        lso = r.int64() if version >= 4 else -1
        log_start = r.int64() if version >= 5 else -1
        aborted = r.nullable_array(_aborted_transaction) if version >= 4 else None
        if version >= 11:
            r.int32()  # preferred read replica
        return PartitionFetchResult(partition, err, hw, lso, log_start, r.nullable_bytes(), aborted)

    r = Reader(body)
    r.int32()  # throttle
    error_code = 0
    if version >= 7:
        error_code = r.int16()
        r.int32()  # session id
    return FetchResponse(error_code, r.topic_map(partition))


def _aborted_transaction(r: Reader) -> tuple[int, int]:
    return r.int64(), r.int64()  # producer id, first offset
