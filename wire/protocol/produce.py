"""Produce (key 0). Versions 3-8 are served (RecordBatch v2 only). v0-2 still parse and get a well-formed
answer, so that a client that picked them learns UNSUPPORTED_VERSION per partition instead of hanging.

The client side (`encode_request`, `parse_response`) speaks v8. Record bytes are never copied into a
request: `encode_request` returns a list of buffers (framing bytes and the caller's record views) for one
`socket.sendmsg`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer

REQUEST_VERSION = 8  # what clients send
NO_TIMESTAMP = -1  # log_append_time of a CreateTime topic (RecordBatch.NO_TIMESTAMP)
RecordsArg = bytes | bytearray | memoryview | list[bytes | bytearray | memoryview]


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
    error_code: int = int(ErrorCode.NONE)
    base_offset: int = -1
    log_append_time: int = NO_TIMESTAMP
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


# ---------------------------------------------------------------------- client side


def encode_request(topics: Iterable[tuple[str, Sequence[tuple[int, RecordsArg]]]],
                   acks: int, timeout_ms: int) -> tuple[int, int, Buffers]:
    """Produce v8 (no transactional id). A partition's records are one buffer or a list of buffers sent
    back to back (several batches from different places); they are referenced, not copied."""
    topics = list(topics)
    parts: Buffers = []
    w = Writer().string(None).int16(acks).int32(timeout_ms).array_len(len(topics))
    for name, partitions in topics:
        w.string(name).array_len(len(partitions))
        for partition, records in partitions:
            chunks = records if isinstance(records, list) else [records]
            w.int32(partition).int32(sum(len(c) for c in chunks))
            parts.append(w.buf)
            parts.extend(chunks)
            w = Writer()
    if w.buf:
        parts.append(w.buf)
    return ApiKey.PRODUCE, REQUEST_VERSION, parts


def parse_response(body: memoryview, version: int = REQUEST_VERSION) -> dict[str, list[PartitionProduceResult]]:
    """A Produce answer (after the correlation id): {topic: [PartitionProduceResult]}."""
    def partition(r: Reader) -> PartitionProduceResult:
        partition, err, base = r.int32(), r.int16(), r.int64()
        append_time = r.int64() if version >= 2 else NO_TIMESTAMP
        log_start = r.int64() if version >= 5 else -1
        message = None
        if version >= 8:
            for _ in range(max(r.array_len(), 0)):  # record errors
                r.int32()
                r.nullable_string()
            message = r.nullable_string()
        return PartitionProduceResult(partition, err, base, append_time, log_start, message)

    return Reader(body).topic_map(partition)
