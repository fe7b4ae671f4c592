"""Audit counts of forwarded batches (tier `mirror`), exact per 10-minute bucket of event time.

A RecordBatch header carries the first record's timestamp and the maximum, but not the minimum: Kafka
lets a record's timestamp precede the first one (negative deltas), so the header alone cannot place every
record in its bucket. The books must balance per bucket, so each batch's records are walked, reading only
what a bucket needs: per record its length varint, the attribute byte and the timestamp-delta varint,
then a jump to the next record (keys, values and headers are never parsed). Compressed batches are
decompressed first (C codecs). Batches with LogAppendTime carry the broker's time: maxTimestamp.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode

from audit.bucket import BUCKET_MS
from broker.record.record_batch import BATCH_HEADER_SIZE, RecordBatchHeader

LOG_APPEND_TIME_MASK = 0x08
CODECS = {1: gzip_decode, 2: snappy_decode, 3: lz4_decode, 4: zstd_decode}


CountFn = Callable[[str, int, int], None]  # AuditCounter.count(topic, timestamp_ms, n)


class BatchWalkError(ValueError):
    """A batch's records do not parse (its CRC was fine, so the producer wrote it wrong)."""


def tally_batches(count: CountFn, topic: str, records: bytes | bytearray | memoryview,
                  spans: Sequence[tuple[int, int]], headers: Sequence[RecordBatchHeader]) -> int:
    """Count every record of the batches at ``spans`` of ``records``; returns how many records were walked."""
    walked = 0
    for (start, size), h in zip(spans, headers, strict=True):
        if h.attributes & LOG_APPEND_TIME_MASK or h.records_count == 1:
            count(topic, h.max_timestamp if h.attributes & LOG_APPEND_TIME_MASK else h.base_timestamp,
                  h.records_count)
            continue
        body = bytes(records[start + BATCH_HEADER_SIZE:start + size])
        codec = h.attributes & 0x07
        if codec:
            decode = CODECS.get(codec)
            if decode is None:
                raise BatchWalkError(f"unknown compression codec {codec}")
            body = decode(body)
        for b, c in bucket_counts(body, h.records_count, h.base_timestamp).items():
            count(topic, b, c)
        walked += h.records_count
    return walked


def bucket_counts(body: bytes, n: int, base_ts: int) -> dict[int, int]:
    """Records per bucket start in an uncompressed records section of ``n`` records."""
    out: dict[int, int] = {}
    pos, end = 0, len(body)
    for _ in range(n):
        # record length (zigzag varint)
        shift = raw = 0
        while True:
            if pos >= end:
                raise BatchWalkError("records section ends inside a record length")
            byte = body[pos]
            pos += 1
            raw |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        length = (raw >> 1) ^ -(raw & 1)
        next_record = pos + length
        if length < 2 or next_record > end:
            raise BatchWalkError(f"bad record length {length}")
        pos += 1  # attributes
        shift = raw = 0
        while True:
            byte = body[pos]
            pos += 1
            raw |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        ts = base_ts + ((raw >> 1) ^ -(raw & 1))
        b = ts - ts % BUCKET_MS
        out[b] = out.get(b, 0) + 1
        pos = next_record
    return out
