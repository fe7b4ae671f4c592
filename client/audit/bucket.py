"""Audit time buckets: 10 minutes of event time, aligned to the UTC epoch.

Every tier buckets by the message's *event* time (the record timestamp), never by the time it saw the
message, so that the producer's, the mirror's and the warehouse's counts of one bucket are comparable.
"""

from __future__ import annotations

BUCKET_MS = 600_000  # 10 minutes
HOUR_MS = 3_600_000


def bucket_start(ts_ms: int) -> int:
    """Start (ms since the epoch, UTC) of the 10-minute bucket holding ``ts_ms``."""
    return ts_ms - ts_ms % BUCKET_MS


def bucket_end(ts_ms: int) -> int:
    """Exclusive end of the bucket holding ``ts_ms``."""
    return bucket_start(ts_ms) + BUCKET_MS


def hour_start(ts_ms: int) -> int:
    """Start of the UTC hour holding ``ts_ms`` (the warehouse's `dt`/`hr` partition)."""
    return ts_ms - ts_ms % HOUR_MS
