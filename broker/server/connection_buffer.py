"""ReadBuffer: a connection's read buffer and the socket's read side. Small while idle, grown with its client's bursts, given
back while the reader waits with nothing buffered; requests too big for it received into their own buffer
once the broker's memory pool (queued.max.request.bytes) has room for them.

After a large request the reader receives exactly the next frame's size field, then exactly its body if it is
small, before reading ahead again: a client that sends only large requests (the mirror's produce requests of
several MB) has each one received straight into its own buffer. Reading ahead 256 KB into the read buffer
first, and copying that into the request's buffer, was ~3% of the offline broker's CPU during a mirror copy.

The reader waits for readability holding no view of the buffer (``_readable``), so the socket server's reaper
can swap a grown buffer for a small one (``release_idle_buffer``) without a pending ``recv`` writing into the
old one. What the frames in the buffer mean is the Connection's: it takes them from ``buf[start:end]``, moves
``start`` past what it handled, and is called back (``handle_frames``) when the readiness callback received some.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable

from ferry.broker.server.memory_pool import MemoryPool
from ferry.broker.server.produce_parse import frame_buffer
from ferry.broker.server.rate_limited_log import RateLimitedLog

READ_BUFFER = 256 * 1024  # the most a connection's read buffer grows to (a pipelining client's bursts)
IDLE_BUFFER = 4 * 1024  # what a connection starts with, and goes back to when it waits with nothing buffered
WOKE_DATA, WOKE_EOF, WOKE_CLOSE = 1, 2, 3  # what _on_readable left for the reader task


class ReadBuffer:
    """Receives a connection's requests: the bytes in ``buf[start:end]``, and each large request on its own."""

    def __init__(self, sock: socket.socket, peer: str, pool: MemoryPool | None, bad_requests: RateLimitedLog,
                 handle_frames: Callable[[], int], has_room: Callable[[], bool]) -> None:
        self.sock = sock
        self._fd = sock.fileno()
        self._peer = peer
        self._pool = pool  # bounds the bytes of the large requests being received at once (memory_pool.py)
        self._bad = bad_requests
        self.handle_frames = handle_frames  # the connection's: handle what is buffered; -1: close, else need
        self._has_room = has_room  # the connection's: fewer requests unanswered than it allows
        self._loop = asyncio.get_running_loop()
        self.buf = bytearray(IDLE_BUFFER)
        self._view = memoryview(self.buf)
        self.start = 0  # the next frame's first byte (its size field)
        self.end = 0  # the end of what was received
        self.woke = 0  # what _on_readable left for the reader task
        self._grow = False  # the last recv filled the buffer: make it larger before the next
        self._exact = False  # after a large request: receive no byte past the next frame
        self._parked = False  # the reader waits for readability with an empty buffer
        self._read_waiter: asyncio.Future | None = None  # the reader's wait for readability (_readable)
        self._read_registered = False  # the socket is among the loop's readers
        self._bursts = 0
        self.last_received = self._loop.time()
        self._tls = isinstance(sock, ssl.SSLSocket)

    async def fill(self, need: int) -> bool:
        """Receive until the buffer holds ``need`` bytes from the start of the next frame; False at EOF."""
        start, end = self.start, self.end
        if start:
            avail = end - start
            if avail:
                self.buf[:avail] = self._view[start:end]
            self.start, self.end = 0, avail
        size = len(self.buf)
        if need > size or (self._grow and size < READ_BUFFER):
            self._resize(min(READ_BUFFER, max(need, 4 * size)))
        self._grow = False
        # Let the writer and other connections run now and then: a recv that finds data does not yield.
        self._bursts += 1
        if self._bursts & 7 == 0:
            await asyncio.sleep(0)
        sock = self.sock
        exact = self._exact
        while self.end < need:
            try:
                k = sock.recv_into(self._view[self.end:need] if exact else self._view[self.end:])
            except (BlockingIOError, ssl.SSLWantReadError):
                if self.woke == WOKE_CLOSE:  # request_close() while the reader was busy
                    return True
                self._parked = self.end == 0
                try:
                    await self._readable()
                finally:
                    self._parked = False
                woke = self.woke
                if woke:  # _on_readable received for us: EOF, a close, or frames handled (or to handle) there
                    if woke == WOKE_CLOSE:
                        return True  # _handle_frames sees it and closes
                    self.woke = 0
                    if woke == WOKE_EOF:
                        return False
                    if self.start:
                        return True
                if need > len(self.buf):  # the reaper gave the buffer back meanwhile
                    self._resize(min(READ_BUFFER, max(need, IDLE_BUFFER)))
                continue
            except InterruptedError:
                continue
            if k == 0:
                return False
            self.end += k
        if exact and need > 4:
            self._exact = False  # a small request after the large ones: read ahead again
        self._grow = not exact and self.end == len(self.buf)
        self.last_received = self._loop.time()
        return True

    def _resize(self, size: int) -> None:
        """A read buffer of ``size`` bytes holding what the current one holds (from 0: _fill compacted it)."""
        new = bytearray(size)
        new[:self.end] = self._view[:self.end]
        self._view.release()
        self.buf, self._view = new, memoryview(new)

    def release_idle_buffer(self) -> bool:
        """Give a grown read buffer back while the reader waits with nothing buffered (called by the reaper)."""
        if self._parked and self.end == 0 and len(self.buf) > IDLE_BUFFER:
            self._resize(IDLE_BUFFER)
            return True
        return False

    async def _readable(self) -> None:
        """Wait until the socket is readable. The socket stays registered with the loop between waits: at one
        message per request the reader waits once per request or two, and registering and unregistering each
        time cost two epoll_ctl calls and a handle. It is unregistered when readiness finds no reader waiting
        (the reader is busy, or stopped for room: no busy loop on a level-triggered fd), and at close."""
        fut = self._loop.create_future()
        self._read_waiter = fut
        if not self._read_registered:
            self._loop.add_reader(self._fd, self._on_readable)
            self._read_registered = True
        try:
            await fut
        finally:
            self._read_waiter = None

    def _on_readable(self) -> None:
        """The socket is readable. With the reader waiting for a new request on an empty buffer, receive and
        handle the requests right here, in the loop's callback, and wake the reader task only when something
        is left for it (a partial or large request, the in-flight limit, EOF, a close): at one message per
        request that saves a task switch and a loop pass per request."""
        fut = self._read_waiter
        if fut is None:
            self.unregister_reader()
            return
        if fut.done():
            return
        if self.start or self.end or self.woke or self._exact:
            fut.set_result(None)
            return
        try:
            k = self.sock.recv_into(self._view)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            return
        except Exception:  # the reader's own recv meets the error again and handles it
            fut.set_result(None)
            return
        if k == 0:
            self.woke = WOKE_EOF
            fut.set_result(None)
            return
        self.end = k
        self.last_received = self._loop.time()
        if k == len(self.buf):  # a burst: the reader grows the buffer and takes it from here
            fut.set_result(None)
            return
        need = self.handle_frames()
        if need < 0:
            self.woke = WOKE_CLOSE
        elif self.start == self.end and need == 4 and self._has_room():
            self.start = self.end = 0  # all handled: the reader goes on waiting
            return
        else:
            self.woke = WOKE_DATA
        fut.set_result(None)

    def request_close(self) -> None:
        """Make the reader stop (it then closes the connection once the answers owed are out)."""
        self.woke = WOKE_CLOSE
        fut = self._read_waiter
        if fut is not None and not fut.done():
            fut.set_result(None)

    def unregister_reader(self) -> None:
        """Take the socket off the loop's readers (before closing it, or before asyncio's own sock_recv_into,
        which registers and unregisters it itself)."""
        if self._read_registered:
            self._read_registered = False
            self._loop.remove_reader(self._fd)

    async def receive_large_frame(self, need: int) -> bytearray | None:
        """A request too big for the read buffer, received into its own buffer once the memory pool has room for
        it (queued.max.request.bytes: the connection waits instead of allocating); None at EOF."""
        size = need - 4
        pool = self._pool
        if pool is None:
            return await self._receive_large_frame(size)
        granted = await pool.acquire(size)
        try:
            return await self._receive_large_frame(size)
        finally:
            pool.release(granted)

    async def _receive_large_frame(self, size: int) -> bytearray | None:
        self.unregister_reader()
        out = frame_buffer(size)  # every byte is received before the frame is dispatched
        mv = memoryview(out)
        avail = self.end - self.start - 4
        if avail > 0:
            mv[:avail] = self._view[self.start + 4:self.end]
        got = max(avail, 0)
        self.start = self.end = 0
        loop, sock = self._loop, self.sock
        while got < size:
            k = await (self._recv_tls(mv[got:]) if self._tls else loop.sock_recv_into(sock, mv[got:]))
            if k == 0:
                self._bad.warning("connection from %s closed inside a %d-byte request", self._peer, size)
                return None
            got += k
        self._exact = True
        self.last_received = loop.time()  # the request is whole now (its request queue time starts here)
        return out

    async def _recv_tls(self, view: memoryview) -> int:
        """loop.sock_recv_into for a TLS socket (asyncio refuses SSLSockets there)."""
        while True:
            try:
                return self.sock.recv_into(view)
            except ssl.SSLWantReadError:
                fut = self._loop.create_future()
                self._loop.add_reader(self._fd, wake, fut)
                try:
                    await fut
                finally:
                    self._loop.remove_reader(self._fd)


def wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
