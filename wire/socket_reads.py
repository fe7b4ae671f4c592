"""Reading an answer straight into the caller's buffer: BrokerConnection's path for answers larger than its read
buffer (the mirror's fetches), where at most the read-ahead is copied."""

from __future__ import annotations

import socket
from collections.abc import Callable


def reusable_buffer(into: bytearray | None, n: int) -> bytearray:
    """``into`` holding at least ``n`` bytes, or a new buffer (none given, or it is still viewed elsewhere)."""
    if into is None:
        return bytearray(n)
    if len(into) < n:
        try:
            into.extend(bytes(n - len(into)))
        except BufferError:  # a view of the last answer is still alive: leave that one alone
            return bytearray(n)
    return into


def recv_exactly(sock: socket.socket, view: memoryview, wait: Callable[[], None] | None = None) -> None:
    """Fill ``view`` from the socket exactly (no read-ahead past the answer); ``wait`` before each recv."""
    got, n = 0, len(view)
    while got < n:
        if wait is not None:
            wait()
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionResetError("connection closed by the broker")
        got += k
