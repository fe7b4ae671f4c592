"""The records inside a v2 batch, one by one: what the log cleaner needs to keep the last record per key, and
what a compacted topic's produce check needs to refuse a record without a key.

Everything else in ferry treats a batch as opaque bytes (paper 3.1). Compaction cannot: it decides per record.
A kept record is copied byte for byte (its offset and timestamp deltas stay relative to the batch's unchanged
baseOffset and baseTimestamp), so a rebuilt batch is the old header with a new count, length and CRC-32C around
the kept records, compressed again with the batch's codec.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from ferry.wire.record.compression import Codec, compress, decompress
from ferry.wire.record.errors import CorruptRecordError
from ferry.wire.record.record_batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CRC_POS,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RecordBatchHeader,
    batch_crc,
)

MAX_SECTION_BYTES = 128 * 1024 * 1024  # what one batch may inflate to while its records are walked
_CRC = struct.Struct(">I")


class RecordRef(NamedTuple):
    """One record of a records section: its offset delta, key (None: no key), whether its value is null (a
    tombstone), and where its bytes are in the section."""

    offset_delta: int
    key: bytes | None
    tombstone: bool
    start: int
    end: int


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos``: (value, position after it)."""
    z = shift = 0
    while True:
        b = raw[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("a record has a malformed varint")


def records_section(batch: bytes | memoryview, h: RecordBatchHeader) -> bytes:
    """The batch's records section, decompressed (``batch`` starts at the batch's first byte)."""
    section = batch[BATCH_HEADER_SIZE : h.batch_length + LOG_OVERHEAD]
    codec = h.attributes & COMPRESSION_MASK
    return bytes(section) if codec == Codec.NONE else decompress(codec, section, MAX_SECTION_BYTES)


def iter_records(raw: bytes) -> Iterator[RecordRef]:
    """Each record of an uncompressed records section; CorruptRecordError on a record that overruns it."""
    pos = 0
    end = len(raw)
    try:
        while pos < end:
            length, body = _varint(raw, pos)
            stop = body + length
            if length < 0 or stop > end:
                raise CorruptRecordError(f"a record claims {length} bytes, {end - body} remain")
            p = body + 1  # attributes (unused)
            _, p = _varint(raw, p)  # timestampDelta
            offset_delta, p = _varint(raw, p)
            key_len, p = _varint(raw, p)
            key = None
            if key_len >= 0:
                key = raw[p : p + key_len]
                p += key_len
            value_len, _ = _varint(raw, p)
            yield RecordRef(offset_delta, key, value_len < 0, pos, stop)
            pos = stop
    except IndexError:
        raise CorruptRecordError("a record ends past its batch") from None


def rebuild_batch(batch: bytes | memoryview, h: RecordBatchHeader, raw: bytes, kept: list[RecordRef],
                  level: int | None = None) -> bytes:
    """The batch holding only the ``kept`` records of ``raw`` (its records section), same header otherwise:
    baseOffset, lastOffsetDelta, timestamps, producer fields and attributes stay (Kafka keeps them so the
    offsets and the producer's sequence state read the same), compressed again with the batch's codec."""
    body = b"".join(raw[r.start : r.end] for r in kept)
    codec = h.attributes & COMPRESSION_MASK
    if codec != Codec.NONE and body:
        body = compress(codec, body, level)
    fields = list(h)
    fields[1] = MIN_BATCH_LENGTH + len(body)  # batchLength
    fields[12] = len(kept)  # recordsCount
    out = bytearray(HEADER_STRUCT.pack(*fields)) + body
    _CRC.pack_into(out, CRC_POS, batch_crc(out, 0, len(out)))
    return bytes(out)


def first_keyless_record(buf: memoryview, headers: list[RecordBatchHeader]) -> int | None:
    """The offset delta of the first record without a key in ``buf``'s batches (control batches aside), or
    None: a compacted topic refuses such records (Kafka: INVALID_RECORD)."""
    pos = 0
    for h in headers:
        size = h.batch_length + LOG_OVERHEAD
        if not h.is_control:
            for r in iter_records(records_section(buf[pos : pos + size], h)):
                if r.key is None:
                    return r.offset_delta
        pos += size
    return None
