"""A connection's outbox entries as its writer and the metrics see them: ready answers packed for one send, the
moments each request went through (RequestMetrics' phases), and how many answers wait to be written.

Entries: a Packed, or (correlation id, Future | list of parts, api key, [read, handler start, handler end,
completed]) for an answer that is not plain bytes (a delayed answer's "completed" is stamped when its future
is done; a list of record slices is complete when handled).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Iterable
from functools import partial

from ferry.broker.server.request_metrics import RequestMetrics

now = time.monotonic  # the clock of loop.time() (ReadBuffer.last_received)


class Packed:
    """Consecutive ready answers, size prefixes included, written with one send; ``times``: (api key, read,
    handler start, handler end) of each answer timed."""

    __slots__ = ("buf", "count", "times")

    def __init__(self, buf: bytes = b"", count: int = 0) -> None:
        self.buf = bytearray(buf)
        self.count = count
        self.times: list[tuple[int, float, float, float]] = []

    def add(self, head: bytes, body: bytes | bytearray, times: tuple[int, float, float, float]) -> None:
        """One more ready answer: ``head`` (its size prefix and correlation id, or b"" for a framed answer),
        ``body``, and its moments."""
        buf = self.buf
        buf += head
        buf += body
        self.count += 1
        self.times.append(times)


def stamp_completed(stamp: list, _fut: asyncio.Future) -> None:
    """A delayed answer is ready: the end of its remote time (a done callback, added before the writer's)."""
    stamp[3] = now()


def tail(out: deque) -> Packed:
    """The outbox's last Packed, to add a ready answer to (a new one behind an answer still to come)."""
    last = out[-1] if out else None
    if type(last) is not Packed:
        last = Packed()
        out.append(last)
    return last


def timed_future(result: Awaitable, stamp: list) -> asyncio.Future:
    """The future of a delayed answer, stamping its completion into ``stamp``."""
    fut = asyncio.ensure_future(result)
    fut.add_done_callback(partial(stamp_completed, stamp))
    return fut


def record_packed(metrics: RequestMetrics, times: list[tuple[int, float, float, float]], sending: float) -> None:
    """The phases of a packed burst's answers, written together from ``sending`` until now."""
    if times:
        sent = now()
        record = metrics.record
        for key, received, started, handled in times:
            record(key, received, started, handled, handled, sending, sent)


def ready_answers(out: Iterable) -> int:
    """Answers ready and not yet written (read from the metrics' thread: ``out`` a copy of the outbox)."""
    ready = 0
    for item in out:
        if type(item) is Packed:
            ready += item.count
        elif type(item[1]) is list or item[1].done():
            ready += 1
    return ready
