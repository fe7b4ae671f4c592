"""Writing through TLS for a Connection: OpenSSL takes a whole buffer or asks to be called again with it
(SSLWantWrite: wait until the socket is writable), and record bytes are read from the segment and encrypted,
since sendfile cannot go through TLS (the cost is in bench/RESULTS.md)."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from functools import partial

TLS_CHUNK = 256 * 1024  # record bytes read from the segment per TLS write
Writable = Callable[[], Awaitable[None]]


def is_tls(sock: socket.socket) -> bool:
    return isinstance(sock, ssl.SSLSocket)


def tls_writers(sock: ssl.SSLSocket, writable: Writable) -> tuple[Callable, Callable]:
    """The Connection's (_send_bytes, _sendfile) for a TLS socket."""
    return partial(send_tls, sock, writable), partial(send_file_tls, sock, writable)


async def send_tls(sock: ssl.SSLSocket, writable: Writable, data: bytes | bytearray | memoryview,
                   flags: int = 0) -> None:
    """Send all of ``data`` (``flags``, such as MSG_MORE, do not apply to TLS)."""
    while True:
        try:
            sock.send(data)
            return
        except ssl.SSLWantWriteError:
            await writable()
        except ssl.SSLWantReadError:  # a TLS 1.2 renegotiation: the peer must speak first
            await asyncio.sleep(0.001)


async def send_file_tls(sock: ssl.SSLSocket, writable: Writable, in_fd: int, offset: int, count: int) -> None:
    while count > 0:
        chunk = os.pread(in_fd, min(count, TLS_CHUNK), offset)
        if not chunk:
            raise ConnectionError(f"segment file ended {count} bytes early at position {offset}")
        await send_tls(sock, writable, chunk)
        offset += len(chunk)
        count -= len(chunk)
