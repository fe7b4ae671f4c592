"""Audit time buckets: 10 minutes of event time, aligned to the UTC epoch.

Every tier buckets by the message's *event* time (the record timestamp), never by the time it saw the
message, so that the producer's, the mirror's and the warehouse's counts of one bucket are comparable.

A record without a timestamp carries -1 (Kafka's NO_TIMESTAMP; a v2 batch with baseTimestamp -1 and delta
0). It is not refused and not re-stamped: every tier counts it by the same floor rule, in the bucket
``bucket_start(-1) == -BUCKET_MS`` (1969-12-31 23:50 UTC), as the producer's delivery report and the mirror's
walk of the log both see -1 (tests/mirror/test_no_timestamp_mirror.py). No real event time falls there,
so such records stay apart. The warehouse loader refuses them (no event time, no hourly partition), so
at that tier the bucket shows them as missing.
"""

from __future__ import annotations

BUCKET_MS = 600_000  # 10 minutes
HOUR_MS = 3_600_000
NO_TIMESTAMP = -1  # a record without a timestamp (RecordBatch.NO_TIMESTAMP)


def bucket_start(ts_ms: int) -> int:
    """Start (ms since the epoch, UTC) of the 10-minute bucket holding ``ts_ms``."""
    return ts_ms - ts_ms % BUCKET_MS


def bucket_end(ts_ms: int) -> int:
    """Exclusive end of the bucket holding ``ts_ms``."""
    return bucket_start(ts_ms) + BUCKET_MS


def hour_start(ts_ms: int) -> int:
    """Start of the UTC hour holding ``ts_ms`` (the warehouse's `dt`/`hr` partition)."""
    return ts_ms - ts_ms % HOUR_MS
