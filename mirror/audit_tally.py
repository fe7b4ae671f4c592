"""Audit counts of forwarded batches (tier `mirror`), exact per 10-minute bucket of event time.

A RecordBatch header carries the first record's timestamp and the maximum, but not the minimum: Kafka
lets a record's timestamp precede the first one (negative deltas), so the header alone cannot place every
record in its bucket. The books must balance per bucket, so each multi-record batch's records are walked:
an uncompressed one by ferry.wire.record.batch_concat's native walk when it is built and takes the records,
otherwise (and for every codec) by aiokafka's C reader (it decompresses gzip/snappy/lz4/zstd itself,
~0.3-0.6 µs a record against ~1-1.5 µs for a Python varint walk). Both give the same numbers: the native
walk takes only records aiokafka reads with the same timestamps, and leaves the others to it. Shortcuts that
need no walk: a one-record batch (its first timestamp is its only one) and LogAppendTime batches (every
record carries the broker's time, maxTimestamp). Coalesced batches are counted by the walk that built them
(batch_rewrite, ForwardedBatches.counts).

A record without a timestamp (-1, NO_TIMESTAMP) counts in ``bucket_start(-1)``, the bucket before the epoch,
like every tier (client/audit/bucket.py): the native walk refuses it and aiokafka's reader, which gives -1,
counts the batch. Counting never raises for a timestamp: a reader that gave None would count it as -1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from aiokafka.errors import KafkaError
from aiokafka.record._crecords.default_records import DefaultRecordBatch

from ferry.client.audit.bucket import BUCKET_MS, NO_TIMESTAMP, bucket_start
from ferry.wire.record import batch_concat
from ferry.wire.record.record_batch import COMPRESSION_MASK, TIMESTAMP_TYPE_MASK, RecordBatchHeader

CountFn = Callable[[str, int, int], None]  # AuditCounter.count(topic, timestamp_ms, n)


class BatchWalkError(ValueError):
    """A batch's records do not parse (its CRC was fine, so the producer wrote it wrong)."""


def tally_batches(count: CountFn, topic: str, records: bytes | bytearray | memoryview,
                  spans: Sequence[tuple[int, int]], headers: Sequence[RecordBatchHeader]) -> int:
    """Count every record of the batches at ``spans`` of ``records``; returns how many records were walked."""
    walked = 0
    for (start, size), h in zip(spans, headers, strict=True):
        if h.attributes & TIMESTAMP_TYPE_MASK or h.records_count == 1:
            count(topic, h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else h.base_timestamp,
                  h.records_count)
            continue
        view = memoryview(records)[start:start + size]
        try:
            buckets = _native_counts(view, h)
            if buckets is None:
                buckets = bucket_counts(bytes(view), h.records_count)
        finally:
            view.release()
        for b, c in buckets.items():
            count(topic, b, c)
        walked += h.records_count
    return walked


def _native_counts(view: memoryview, h: RecordBatchHeader) -> dict[int, int] | None:
    """The native walk's counts of an uncompressed batch, or None (not built, compressed, or records it
    leaves to aiokafka's reader)."""
    if not batch_concat.NATIVE or h.attributes & COMPRESSION_MASK:
        return None
    try:
        n, buckets = batch_concat.count_records(view, BUCKET_MS)
    except batch_concat.RecordWalkError:
        return None
    return buckets if n == h.records_count else None


def bucket_counts(batch: bytes, n: int) -> dict[int, int]:
    """Records per bucket start of one whole v2 batch (header included) that holds ``n`` records."""
    try:
        stamps = [r.timestamp for r in DefaultRecordBatch(batch)]
    except (KafkaError, ValueError, IndexError, OverflowError) as e:  # CorruptRecordException, UnsupportedCodec
        raise BatchWalkError(f"records do not parse: {e}") from e
    if len(stamps) != n:
        raise BatchWalkError(f"{len(stamps)} records, header says {n}")
    if not stamps:
        return {}
    try:
        lo, hi = min(stamps), max(stamps)
    except TypeError:  # a reader that gives None for NO_TIMESTAMP (aiokafka 0.14 gives -1): count it as -1
        stamps = [NO_TIMESTAMP if ts is None else ts for ts in stamps]
        lo, hi = min(stamps), max(stamps)
    if lo - lo % BUCKET_MS == hi - hi % BUCKET_MS:
        return {lo - lo % BUCKET_MS: n}  # the common case: the whole batch in one bucket
    return dict(Counter(ts - ts % BUCKET_MS for ts in stamps))


def count_batch(counts: Counter, batch: bytes | bytearray | memoryview, h: RecordBatchHeader) -> bool:
    """Add one whole batch's records to ``counts`` (bucket start -> records).

    A batch whose records do not parse (its CRC was right, so its producer wrote it so) is counted in the
    bucket of its first timestamp and False is returned. The same rule wherever the mirror counts: a range
    counted by the mirror that wrote it and again, from the offline log, by the one that took over must give
    the same numbers (they are published under the same guids).
    """
    def add(_topic: str, ts: int, n: int) -> None:
        counts[bucket_start(ts)] += n

    try:
        tally_batches(add, "", batch, [(0, len(batch))], [h])
        return True
    except BatchWalkError:
        counts[bucket_start(h.base_timestamp)] += h.records_count
        return False
