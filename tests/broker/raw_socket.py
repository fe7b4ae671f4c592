"""Reading exactly n bytes from a raw socket (tests that speak the Kafka protocol by hand)."""

from __future__ import annotations

import socket


def recv_exactly(s: socket.socket, n: int) -> bytes:
    """n bytes, or ConnectionError when the peer closes first."""
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out
