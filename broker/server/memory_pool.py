"""MemoryPool: a ceiling on the bytes of all requests being received at once (Kafka's queued.max.request.bytes).

A connection that announces a request too large for its read buffer asks the pool for the request's size before
it allocates anything; while the pool has no room it waits (reading nothing more from that socket: TCP's own
flow control holds the client back), first come first served. So no set of clients, however many and however
slowly they send, can make the broker hold more than the ceiling in request buffers. A request larger than the
whole pool (possible when socket.request.max.bytes is larger) waits until the pool is empty and then takes it all.
A capacity of 0 or less means no ceiling.
"""

from __future__ import annotations

import asyncio
from collections import deque


class MemoryPool:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.available = capacity
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()

    @property
    def bounded(self) -> bool:
        return self.capacity > 0

    @property
    def waiting(self) -> int:
        """Connections waiting for room now."""
        return len(self._waiters)

    async def acquire(self, size: int) -> int:
        """Wait until ``size`` bytes (at most the capacity) are free and take them; returns what to release."""
        if self.capacity <= 0:
            return 0
        size = min(size, self.capacity)
        if not self._waiters and self.available >= size:
            self.available -= size
            return size
        fut = asyncio.get_running_loop().create_future()
        entry = (size, fut)
        self._waiters.append(entry)
        try:
            await fut  # granted: release() already took the bytes for us
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release(size)  # granted and cancelled at once: give it back
            else:
                try:
                    self._waiters.remove(entry)
                except ValueError:
                    pass
                self._wake()
            raise
        return size

    def release(self, size: int) -> None:
        if self.capacity <= 0 or size <= 0:
            return
        self.available = min(self.capacity, self.available + size)
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._waiters[0][0] <= self.available:
            size, fut = self._waiters.popleft()
            if fut.done():
                continue
            self.available -= size
            fut.set_result(None)
