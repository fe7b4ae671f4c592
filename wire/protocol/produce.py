"""Produce (key 0). Versions 3-8 are served (RecordBatch v2 only). v0-2 still parse and get a well-formed
answer, so that a client that picked them learns UNSUPPORTED_VERSION per partition instead of hanging."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    # [(topic, [(partition, records view or None)])]
    topics: list[tuple[str, list[tuple[int, memoryview | None]]]]


def _partition(r: Reader) -> tuple[int, memoryview | None]:
    return r.int32(), r.nullable_bytes()


def _topic(r: Reader) -> tuple[str, list[tuple[int, memoryview | None]]]:
    return r.string(), r.array(_partition)


def parse_request(r: Reader, version: int) -> ProduceRequest:
    txn = r.nullable_string() if version >= 3 else None
    acks = r.int16()
    timeout = r.int32()
    return ProduceRequest(txn, acks, timeout, r.array(_topic))


@dataclass(slots=True)
class PartitionProduceResult:
    partition: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


def encode_response(version: int, topics: list[tuple[str, list[PartitionProduceResult]]]) -> bytes:
    w = Writer().array_len(len(topics))
    for name, parts in topics:
        w.string(name).array_len(len(parts))
        for p in parts:
            w.int32(p.partition).int16(p.error_code).int64(p.base_offset)
            if version >= 2:
                w.int64(p.log_append_time)
            if version >= 5:
                w.int64(p.log_start_offset)
            if version >= 8:
                w.array_len(0)  # record_errors
                w.string(p.error_message)
    if version >= 1:
        w.int32(0)  # throttle_time_ms
    return bytes(w.buf)
