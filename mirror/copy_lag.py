"""How far behind and how fast a copy is, the same for both mirror kinds (`ferry mirror status`, /metrics).

Lag in messages is the live end minus the live offset the copy reached. Lag in seconds is how old the last
copied message is while messages wait to be copied (the live end of a partition being written is "now"), and 0
once the copy reached the live end: the number an operator compares with the delay the warehouse tolerates.
Throughput is the rate between two readings of the copy's counters.
"""

from __future__ import annotations

import time
from collections.abc import Hashable


def lag_messages(live_end: int | None, copied_to: int | None) -> int | None:
    """Live end minus copied-to, or None when either is unknown (-1 or None)."""
    if live_end is None or copied_to is None or live_end < 0 or copied_to < 0:
        return None
    return max(live_end - copied_to, 0)


def lag_seconds(lag: int | None, copied_timestamp_ms: int | None, now_ms: int | None = None) -> float | None:
    """0 when caught up; else the age of the last copied message (None when nothing was copied yet)."""
    if lag is None:
        return None
    if lag == 0:
        return 0.0
    if copied_timestamp_ms is None or copied_timestamp_ms < 0:
        return None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return round(max(now - copied_timestamp_ms, 0) / 1000.0, 3)


class CopyRates:
    """Messages and bytes per second per key (a partition's copy), from consecutive readings of its counters."""

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[float, int, int]] = {}

    def rate(self, key: Hashable, messages: int, nbytes: int, now: float | None = None) -> tuple[float, float]:
        """(messages/s, bytes/s) since the previous reading of ``key``; (0, 0) at the first one, or when the
        counters went back (a new copier of the partition started from 0)."""
        t = time.monotonic() if now is None else now
        last = self._last.get(key)
        self._last[key] = (t, messages, nbytes)
        if last is None or t <= last[0] or messages < last[1] or nbytes < last[2]:
            return 0.0, 0.0
        dt = t - last[0]
        return round((messages - last[1]) / dt, 1), round((nbytes - last[2]) / dt, 1)

    def forget(self, keep: set) -> None:
        """Drop the keys not in ``keep`` (partitions no longer copied here)."""
        for key in set(self._last) - keep:
            del self._last[key]
