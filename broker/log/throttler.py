"""An I/O budget in bytes per second, shared by threads (the log cleaners' log.cleaner.io.max.bytes.per.second,
Kafka's Throttler): a caller that got ahead of the rate sleeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Throttler:
    """``acquire(n)`` after moving ``n`` bytes sleeps so that all callers together stay under ``bytes_per_second``."""

    def __init__(self, bytes_per_second: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._start = clock()
        self._bytes = 0.0

    def acquire(self, n: int) -> None:
        if self.rate == float("inf") or n <= 0:
            return
        with self._lock:
            self._bytes += n
            now = self._clock()
            ahead = self._bytes / self.rate - (now - self._start)
            if now - self._start > 1.0:  # a fresh window each second: an idle spell is not credit for a burst
                self._start, self._bytes = now, max(0.0, ahead * self.rate)
        if ahead > 0:
            self._sleep(ahead)
