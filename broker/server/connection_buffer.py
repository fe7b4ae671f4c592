"""A connection's read buffer (a part of Connection): small while idle, grown with its client's bursts, given
back while the reader waits with nothing buffered; requests too big for it received into their own buffer
once the broker's memory pool (queued.max.request.bytes) has room for them.

The reader waits for readability holding no view of the buffer (``_readable``), so the socket server's reaper
can swap a grown buffer for a small one (``release_idle_buffer``) without a pending ``recv`` writing into the
old one.
"""

from __future__ import annotations

import asyncio
from typing import Any

READ_BUFFER = 256 * 1024  # the most a connection's read buffer grows to (a pipelining client's bursts)
IDLE_BUFFER = 4 * 1024  # what a connection starts with, and goes back to when it waits with nothing buffered


class ConnectionReadBuffer:
    """The read buffer of a Connection (its attributes are set in Connection.__init__)."""

    _buf: bytearray
    _view: memoryview
    _start: int
    _end: int
    _grow: bool
    _parked: bool
    _bursts: int
    _last_active: float
    _loop: asyncio.AbstractEventLoop
    _fd: int
    sock: Any
    pool: Any
    peer: str
    _bad: Any

    async def _fill(self, need: int) -> bool:
        """Receive until the buffer holds ``need`` bytes from the start of the next frame; False at EOF."""
        start, end = self._start, self._end
        if start:
            avail = end - start
            if avail:
                self._buf[:avail] = self._view[start:end]
            self._start, self._end = 0, avail
        size = len(self._buf)
        if need > size or (self._grow and size < READ_BUFFER):
            self._resize(min(READ_BUFFER, max(need, 4 * size)))
        self._grow = False
        # Let the writer and other connections run now and then: a recv that finds data does not yield.
        self._bursts += 1
        if self._bursts & 7 == 0:
            await asyncio.sleep(0)
        sock = self.sock
        while self._end < need:
            try:
                k = sock.recv_into(self._view[self._end:])
            except BlockingIOError:
                self._parked = self._end == 0
                try:
                    await self._readable()
                finally:
                    self._parked = False
                if need > len(self._buf):  # the reaper gave the buffer back meanwhile
                    self._resize(min(READ_BUFFER, max(need, IDLE_BUFFER)))
                continue
            except InterruptedError:
                continue
            if k == 0:
                return False
            self._end += k
        self._grow = self._end == len(self._buf)
        self._last_active = self._loop.time()
        return True

    def _resize(self, size: int) -> None:
        """A read buffer of ``size`` bytes holding what the current one holds (from 0: _fill compacted it)."""
        new = bytearray(size)
        new[:self._end] = self._view[:self._end]
        self._view.release()
        self._buf, self._view = new, memoryview(new)

    def release_idle_buffer(self) -> bool:
        """Give a grown read buffer back while the reader waits with nothing buffered (called by the reaper)."""
        if self._parked and self._end == 0 and len(self._buf) > IDLE_BUFFER:
            self._resize(IDLE_BUFFER)
            return True
        return False

    async def _readable(self) -> None:
        fut = self._loop.create_future()
        self._loop.add_reader(self._fd, _wake, fut)
        try:
            await fut
        finally:
            self._loop.remove_reader(self._fd)

    async def _handle_large_frame(self, need: int) -> bool:
        """A request too big for the read buffer: receive it into its own buffer, once the memory pool has room
        for it (queued.max.request.bytes: the connection waits instead of allocating)."""
        size = need - 4
        pool = self.pool
        if pool is None:
            return await self._receive_large_frame(size)
        granted = await pool.acquire(size)
        try:
            return await self._receive_large_frame(size)
        finally:
            pool.release(granted)

    async def _receive_large_frame(self, size: int) -> bool:
        out = bytearray(size)
        mv = memoryview(out)
        avail = self._end - self._start - 4
        if avail > 0:
            mv[:avail] = self._view[self._start + 4:self._end]
        got = max(avail, 0)
        self._start = self._end = 0
        loop, sock = self._loop, self.sock
        while got < size:
            k = await loop.sock_recv_into(sock, mv[got:])
            if k == 0:
                self._bad.warning("connection from %s closed inside a %d-byte request", self.peer, size)
                return False
            got += k
        ok = self._dispatch(out)
        self._flush_ready()
        return ok


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
