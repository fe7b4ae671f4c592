"""A logging filter that lets one line of a kind through per interval: librdkafka repeats a broken
connection's error many times a second, which helps nobody reading a console."""

from __future__ import annotations

import logging
import re
import time

_NUMBERS = re.compile(r"\d+")


class RateLimitFilter(logging.Filter):
    def __init__(self, interval_s: float = 30.0) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = _NUMBERS.sub("#", record.getMessage())[:160]  # "after 0ms" vs "after 3ms": the same line
        now = time.monotonic()
        if now - self._last.get(key, -1e9) < self.interval_s:
            return False
        if len(self._last) > 1000:
            self._last.clear()
        self._last[key] = now
        return True


def rate_limited_logger(name: str, interval_s: float = 30.0) -> logging.Logger:
    logger = logging.getLogger(name)
    if not any(isinstance(f, RateLimitFilter) for f in logger.filters):
        logger.addFilter(RateLimitFilter(interval_s))
    return logger
