"""AnswerReader: the answers of one Kafka connection read by asyncio straight into their own buffers.

Why not asyncio's StreamReader: each socket read there is a new bytes object (at most 256 KiB), appended to the
reader's bytearray, then copied out again by ``readexactly``: an 8 MiB Fetch answer cost two copies beyond the
kernel's and ~32 event-loop callbacks, a third of the embedded mirror's busy event loop (py-spy). As a
``BufferedProtocol`` the transport reads (``recv_into``) into the answer's own bytearray, sized from its length
prefix: one copy, and a read takes whatever the socket holds. The buffers are kept and reused once nothing
refers to an answer read into them any more: a fresh 8 MiB bytearray per answer cost its page faults and
zeroing, as much as the socket reads themselves on a busy machine (py-spy).

One answer at a time (the connection's callers wait for each answer before the next request).
"""

from __future__ import annotations

import asyncio
import sys

_SIZE_BYTES = 4
SPARE_BUFFERS = 3  # one being read, one in the caller's hands (a fetch ahead), one more
# references to a kept buffer that nothing else holds: the spares list, the loop's name, getrefcount's argument
_UNUSED_REFS = 3


class AnswerReader(asyncio.BufferedProtocol):
    """Frames ``int32 size`` + ``size`` bytes off the socket; ``read()`` returns the next frame's bytes."""

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame  # a larger size prefix means the stream is not what it should be
        self.transport: asyncio.Transport | None = None
        self._head = bytearray(_SIZE_BYTES)
        self._frame: memoryview | None = None  # the frame being read, once its size is known
        self._got = 0
        self._ready: list[memoryview] = []
        self._spares: list[bytearray] = []  # buffers answers were read into, reused once no answer refers to them
        self._waiter: asyncio.Future | None = None
        self._error: BaseException | None = None
        self._drained: asyncio.Future | None = None  # set while the transport asks writers to pause

    # -- asyncio's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is None:
            return memoryview(self._head)[self._got:]
        return self._frame[self._got:]

    def buffer_updated(self, nbytes: int) -> None:
        self._got += nbytes
        if self._frame is None:
            if self._got < _SIZE_BYTES:
                return
            size = int.from_bytes(self._head, "big", signed=True)
            if size < 4 or size > self.max_frame:
                self._fail(ConnectionError(f"bad frame: response size {size}"))
                self._got = 0  # whatever comes until the close is dropped
                if self.transport is not None:
                    self.transport.close()
                return
            self._frame, self._got = self._buffer(size), 0
            return
        if self._got == len(self._frame):
            frame, self._frame, self._got = self._frame, None, 0
            self._ready.append(frame)
            waiter, self._waiter = self._waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    def _buffer(self, size: int) -> memoryview:
        """``size`` bytes to read a frame into: a kept buffer no answer refers to any more, else a new one."""
        spares = self._spares
        for i in range(len(spares)):
            spare = spares[i]  # (not enumerate: its cached tuple would hold one more reference)
            if sys.getrefcount(spare) <= _UNUSED_REFS:
                if len(spare) < size:
                    spare = spares[i] = bytearray(size)
                return memoryview(spare)[:size]
        buf = bytearray(size)
        if len(spares) < SPARE_BUFFERS:
            spares.append(buf)
        return memoryview(buf)

    def eof_received(self) -> bool:
        self._fail(EOFError("the broker closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc if exc is not None else EOFError("the connection closed"))
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(self._error)

    # -- the connection's side
    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if self._error is not None:
            raise self._error
        if self._drained is not None:
            await self._drained

    async def read(self) -> memoryview:
        """The next whole frame (its size prefix taken off; its buffer is reused once nothing refers to it any
        more); EOFError/OSError when the connection ended first."""
        while not self._ready:
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._ready.pop(0)
