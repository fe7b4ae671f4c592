"""LogFlusher: acks=-1 waits for fsync without blocking the event loop, and concurrent waiters on one log
share a single fsync (group commit). Parked fetches learn of the flush through the log's
high-watermark listener, not from here."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import Any


class FlushError(RuntimeError):
    """fsync failed or did not cover the appended offsets."""


class LogFlusher:
    def __init__(self, loop: asyncio.AbstractEventLoop, executor: Executor) -> None:
        self._loop = loop
        self._executor = executor
        self._inflight: dict[int, asyncio.Future] = {}

    async def flushed_to(self, log: Any, offset: int) -> None:
        """Return once `log.flushed_offset >= offset` (offset exclusive).

        Joining a flush already in flight may not cover this append (it took its snapshot before), so the
        loop starts another; a flush started after the append always covers it, hence at most two rounds.
        """
        key = id(log)
        rounds = 0
        while log.flushed_offset < offset:
            if rounds >= 3:
                raise FlushError(f"flushed offset {log.flushed_offset} < {offset} after flushing")
            rounds += 1
            fut = self._inflight.get(key)
            if fut is None or fut.done():  # done but its forget callback has not run yet: start anew
                fut = self._loop.run_in_executor(self._executor, log.flush)
                self._inflight[key] = fut
                fut.add_done_callback(lambda f, key=key: self._forget(key, f))
            await asyncio.shield(fut)

    def _forget(self, key: int, fut: asyncio.Future) -> None:
        if self._inflight.get(key) is fut:
            del self._inflight[key]
