"""Audit counts of forwarded batches (tier `mirror`) without decoding records when the header suffices.

A batch whose baseTimestamp and maxTimestamp fall in the same 10-minute bucket is counted as a whole
(recordsCount into that bucket): the usual case, since producers batch for milliseconds. Only a batch that
spans a bucket boundary is decompressed and its records' timestamps read one by one (kafka-python's
reader). Batches with LogAppendTime carry the broker's time for every record: maxTimestamp.

One caveat of the header shortcut: Kafka allows a record's timestamp to precede its batch's first record
(negative timestamp deltas). A producer that puts an earlier-bucket record after a later-bucket one in
the same batch is then counted one bucket late; totals per topic are unaffected.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kafka.record.default_records import DefaultRecordBatch

from audit.bucket import bucket_start
from broker.record.record_batch import RecordBatchHeader

LOG_APPEND_TIME_MASK = 0x08

CountFn = Callable[[str, int, int], None]  # AuditCounter.count(topic, timestamp_ms, n)


def tally_batches(count: CountFn, topic: str, records: bytes | bytearray | memoryview,
                  spans: Sequence[tuple[int, int]], headers: Sequence[RecordBatchHeader]) -> int:
    """Count every record of the batches at ``spans`` of ``records``; returns how many were decoded."""
    decoded = 0
    for (start, size), h in zip(spans, headers, strict=True):
        if h.attributes & LOG_APPEND_TIME_MASK:
            count(topic, h.max_timestamp, h.records_count)
        elif bucket_start(h.base_timestamp) == bucket_start(h.max_timestamp):
            count(topic, h.base_timestamp, h.records_count)
        else:
            decoded += _tally_records(count, topic, bytes(records[start:start + size]))
    return decoded


def _tally_records(count: CountFn, topic: str, batch: bytes) -> int:
    per_bucket: dict[int, int] = {}
    n = 0
    for record in DefaultRecordBatch(batch):
        b = bucket_start(record.timestamp)
        per_bucket[b] = per_bucket.get(b, 0) + 1
        n += 1
    for b, c in per_bucket.items():
        count(topic, b, c)
    return n
