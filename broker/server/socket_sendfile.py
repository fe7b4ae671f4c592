"""Zero-copy sends for a plaintext connection: segment bytes from the file to the socket with `os.sendfile`,
waiting on the event loop (never blocking it) when the socket's buffer is full."""

from __future__ import annotations

import asyncio
import os

from ferry.broker.server.connection_buffer import wake


async def writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Wait until the socket ``fd`` takes more bytes."""
    fut = loop.create_future()
    loop.add_writer(fd, wake, fut)
    try:
        await fut
    finally:
        loop.remove_writer(fd)


async def sendfile_all(loop: asyncio.AbstractEventLoop, out_fd: int, in_fd: int, offset: int, count: int) -> None:
    """Send ``count`` bytes of ``in_fd`` from ``offset``; a file shorter than promised ends the connection."""
    while count > 0:
        try:
            n = os.sendfile(out_fd, in_fd, offset, count)
        except BlockingIOError:
            await writable(loop, out_fd)
            continue
        if n == 0:
            # The file is shorter than the slice promised: the frame cannot be completed.
            raise ConnectionError(f"segment file ended {count} bytes early at position {offset}")
        offset += n
        count -= n
