"""Client side of the wire codec: request bodies for the APIs the mirror speaks (non-flexible versions).

The broker's `broker/protocol/` modules parse requests and encode responses; these functions do the
reverse for a client. Record bytes are never copied into a request: `produce_request` returns a list of
buffers (framing bytes and the caller's record views) for one `socket.sendmsg`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.fetch import FetchPartition
from ferry.wire.protocol.primitives import Writer

METADATA_VERSION = 8
FETCH_VERSION = 11
PRODUCE_VERSION = 8
LIST_OFFSETS_VERSION = 5
INIT_PRODUCER_ID_VERSION = 1

CONSUMER_REPLICA_ID = -1  # a Fetch/ListOffsets from a client, not a follower
READ_UNCOMMITTED = 0

Buffers = list[bytes | bytearray | memoryview]
RecordsArg = bytes | bytearray | memoryview | list[bytes | bytearray | memoryview]


def request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """Request header v1: api_key, api_version, correlation_id, client_id."""
    return bytes(Writer().int16(api_key).int16(api_version).int32(correlation_id).string(client_id).buf)


def metadata_request(topics: Sequence[str] | None) -> tuple[int, int, Buffers]:
    """Metadata v8 for ``topics`` (None = every topic); never asks the broker to create topics."""
    w = Writer()
    if topics is None:
        w.array_len(-1)
    else:
        w.array_len(len(topics))
        for t in topics:
            w.string(t)
    w.boolean(False)  # allow_auto_topic_creation
    w.boolean(False).boolean(False)  # include cluster/topic authorized operations
    return ApiKey.METADATA, METADATA_VERSION, [w.buf]


def fetch_request(topics: Iterable[tuple[str, Sequence[FetchPartition]]], max_wait_ms: int, min_bytes: int,
                  max_bytes: int) -> tuple[int, int, Buffers]:
    """Fetch v11, full request without a fetch session (session id 0, epoch -1)."""
    topics = list(topics)
    w = Writer().int32(CONSUMER_REPLICA_ID).int32(max_wait_ms).int32(min_bytes).int32(max_bytes)
    w.int8(READ_UNCOMMITTED).int32(0).int32(-1)
    w.array_len(len(topics))
    for name, parts in topics:
        w.string(name).array_len(len(parts))
        for p in parts:
            w.int32(p.partition).int32(p.current_leader_epoch).int64(p.fetch_offset)
            w.int64(p.log_start_offset).int32(p.max_bytes)
    w.array_len(0)  # forgotten topics
    w.string("")  # rack id
    return ApiKey.FETCH, FETCH_VERSION, [w.buf]


def produce_request(topics: Iterable[tuple[str, Sequence[tuple[int, RecordsArg]]]],
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
    return ApiKey.PRODUCE, PRODUCE_VERSION, parts


def list_offsets_request(topics: Iterable[tuple[str, Sequence[tuple[int, int]]]]) -> tuple[int, int, Buffers]:
    """ListOffsets v5: [(topic, [(partition, timestamp)])]; timestamp -2 earliest, -1 latest."""
    topics = list(topics)
    w = Writer().int32(CONSUMER_REPLICA_ID).int8(READ_UNCOMMITTED).array_len(len(topics))
    for name, partitions in topics:
        w.string(name).array_len(len(partitions))
        for partition, timestamp in partitions:
            w.int32(partition).int32(-1).int64(timestamp)  # current_leader_epoch unknown
    return ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, [w.buf]


def init_producer_id_request(transaction_timeout_ms: int = 60_000) -> tuple[int, int, Buffers]:
    """InitProducerId v1 for an idempotent (not transactional) producer."""
    return ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, [Writer().string(None).int32(transaction_timeout_ms).buf]
