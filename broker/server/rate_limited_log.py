"""RateLimitedLog: at most a few log lines per interval about bad requests, then one line saying how many
were left out. A client (or thousands of hostile connections) sending garbage must not be able to fill the
broker's log or spend its CPU on formatting lines nobody reads."""

from __future__ import annotations

import logging
import time


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, per_interval: int = 20, interval_s: float = 10.0,
                 what: str = "bad requests or connections") -> None:
        self.logger = logger
        self.what = what  # what the lines are about (the summary line names it)
        self.per_interval = per_interval
        self.interval_s = interval_s
        self._window_start = -1e18
        self._in_window = 0
        self.suppressed = 0  # lines left out since the last one written
        self.total_suppressed = 0

    def warning(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._window_start >= self.interval_s:
            if self.suppressed:
                self.logger.warning("%d more lines about %s left out in the last %.0f s",
                                    self.suppressed, self.what, self.interval_s)
            self._window_start = now
            self._in_window = 0
            self.suppressed = 0
        if self._in_window < self.per_interval:
            self._in_window += 1
            self.logger.warning(msg, *args)
        else:
            self.suppressed += 1
            self.total_suppressed += 1
