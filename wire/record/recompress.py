"""Bring a produce payload's batches to the topic's ``compression.type`` (Kafka's broker-side recompression).

A batch's header (offset and timestamp deltas, producer id, sequences, record count) does not depend on
the codec: only the records section after the 61-byte header is compressed. So converting a batch is
decompress, walk the records (their count must match the header), compress, then a new batchLength,
attributes and CRC-32C. Batches already in the topic's codec pass through untouched, and with the default
``producer`` nothing is converted: the paper's no-per-message-work path stays the common one.
"""

from __future__ import annotations

import struct

from ferry.wire.record.compression import Codec, compress, decompress
from ferry.wire.record.errors import CorruptRecordError, RecordTooLargeError
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

_CRC = struct.Struct(">I")
MAX_DECOMPRESSED_BYTES = 128 * 1024 * 1024  # what one batch may inflate to while being converted


def recompress_batches(
    buf: memoryview, headers: list[RecordBatchHeader], codec: int, level: int | None,
    max_batch_bytes: int, limit: int = MAX_DECOMPRESSED_BYTES,
) -> tuple[bytes, list[RecordBatchHeader]] | None:
    """The payload with every batch in ``codec``, and its new headers; None if all already are.

    Raises CorruptRecordError (a compressed section that does not decompress, or whose records do not
    match the header's count) or RecordTooLargeError (a converted batch over ``max_batch_bytes``, or
    a section that inflates beyond ``limit``). Nothing is half-converted: the caller writes all or nothing.
    """
    if all(h.attributes & COMPRESSION_MASK == codec for h in headers):
        return None
    pieces: list[bytes | memoryview] = []
    out_headers: list[RecordBatchHeader] = []
    pos = 0
    for h in headers:
        size = h.batch_length + LOG_OVERHEAD
        current = h.attributes & COMPRESSION_MASK
        if current == codec:
            pieces.append(buf[pos : pos + size])
            out_headers.append(h)
            pos += size
            continue
        section = buf[pos + BATCH_HEADER_SIZE : pos + size]
        raw = decompress(current, section, limit) if current != Codec.NONE else section
        found = count_records(raw)
        if found != h.records_count:
            raise CorruptRecordError(
                f"record batch at byte {pos} holds {found} records, its header says {h.records_count}")
        body = compress(codec, raw, level) if codec != Codec.NONE else bytes(raw)
        new_size = BATCH_HEADER_SIZE + len(body)
        if new_size > max_batch_bytes:
            raise RecordTooLargeError(
                f"record batch of {new_size} bytes after conversion exceeds max.message.bytes {max_batch_bytes}")
        fields = list(h)
        fields[1] = MIN_BATCH_LENGTH + len(body)  # batchLength
        fields[5] = (h.attributes & ~COMPRESSION_MASK) | codec  # attributes
        batch = bytearray(HEADER_STRUCT.pack(*fields)) + body
        fields[4] = batch_crc(batch, 0, len(batch))  # covers attributes..end: computed after the new attributes
        _CRC.pack_into(batch, CRC_POS, fields[4])
        pieces.append(batch)
        out_headers.append(RecordBatchHeader._make(fields))
        pos += size
    return b"".join(pieces), out_headers


def count_records(raw: bytes | memoryview) -> int:
    """How many records an uncompressed records section holds (each is a zig-zag varint length, then that
    many bytes); CorruptRecordError if the last one overruns the section."""
    n = 0
    pos = 0
    end = len(raw)
    while pos < end:
        z = shift = 0
        while True:
            if pos >= end or shift > 28:
                raise CorruptRecordError(f"record {n} has a malformed length")
            b = raw[pos]
            pos += 1
            z |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        length = (z >> 1) ^ -(z & 1)
        if length < 0 or pos + length > end:
            raise CorruptRecordError(f"record {n} claims {length} bytes, {end - pos} remain")
        pos += length
        n += 1
    return n
