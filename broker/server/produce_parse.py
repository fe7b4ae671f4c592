"""The common Produce request read in one call: its fields (acks as sent: produce_rules.ack_mode decides what it
means) and, when its records are exactly one valid batch, that batch's header (checked as validate_batches checks
it: framing, magic, counts, attributes, CRC-32C).

``parse`` is the native module (broker/server/_produce_native.pyx, the native part ``produce``) when it is
built, else ``parse_py``, its pure-Python twin: both answer alike, byte for byte (tests/broker compare them).
``FERRY_NATIVE_DISABLE=produce`` forces the Python one. ``NATIVE`` says which one the broker runs (its
start-up log line says it too).
"""

from __future__ import annotations

import struct

import crc32c

from ferry.wire import native
from ferry.wire.record.record_batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_MASK,
    RecordBatchHeader,
)

FIRST_VERSION, LAST_VERSION = 3, 8
_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_BODY = struct.Struct(">hhiih")  # transactional id length, acks, timeout, topics count, topic name length
_PARTITION = struct.Struct(">iii")  # partitions count, partition, record set size
_REFUSED = CONTROL_MASK | TRANSACTIONAL_MASK  # not without a transactional id
_make = RecordBatchHeader._make

# (version, correlation id, acks, timeout ms, topic name, partition, records position, header or None)
Parsed = tuple[int, int, int, int, bytes, int, int, RecordBatchHeader | None]


def parse_py(frame: bytes | bytearray | memoryview) -> Parsed | None:
    """None when ``frame`` is not the fast path's shape (one topic, one partition, no transactional id, Produce
    v3-8, the records filling the rest of the frame); else its fields and the header of its one
    batch when the records are exactly one batch that validate_batches accepts with no size limit (None
    otherwise: the log's general append validates then and refuses with the precise error)."""
    end = len(frame)
    if end < 12:
        return None
    api_key, version, correlation_id, client_id_len = _HEADER.unpack_from(frame, 0)
    if api_key != 0 or not FIRST_VERSION <= version <= LAST_VERSION:
        return None
    pos = 10 + client_id_len if client_id_len > 0 else 10
    if end < pos + 14:
        return None
    txn_len, acks, timeout_ms, topics, name_len = _BODY.unpack_from(frame, pos)
    if txn_len != -1:  # a transactional id: general path
        return None
    pos += 14
    if topics != 1 or name_len <= 0 or end < pos + name_len + 12:
        return None
    topic = bytes(frame[pos:pos + name_len])
    pos += name_len
    count, partition, size = _PARTITION.unpack_from(frame, pos)
    pos += 12
    if count != 1 or size <= 0 or pos + size != end:
        return None
    head = None
    if size >= BATCH_HEADER_SIZE:
        h = _make(HEADER_STRUCT.unpack_from(frame, pos))
        if (h.magic == CURRENT_MAGIC and h.batch_length >= MIN_BATCH_LENGTH and h.batch_length + LOG_OVERHEAD == size
                and h.records_count > 0 and h.last_offset_delta + 1 >= h.records_count and not h.attributes & _REFUSED
                and crc32c.crc32c(memoryview(frame)[pos + ATTRIBUTES_POS:end]) == h.crc):
            head = h
    return version, correlation_id, acks, timeout_ms, topic, partition, pos, head


native_module = native.load("produce")
NATIVE = native_module is not None
parse = native_module.parse if native_module is not None else parse_py
# a buffer for a request that is received whole before it is read: not zeroed when native
frame_buffer = native_module.frame_buffer if native_module is not None else bytearray
