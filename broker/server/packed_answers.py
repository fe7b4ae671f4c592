"""PackedAnswers: a connection's consecutive ready answers, size prefixes included, written with one send
(connection.py's outbox holds them between the answers still to come)."""

from __future__ import annotations


class PackedAnswers:
    """Consecutive ready answers, size prefixes included, written with one send."""

    __slots__ = ("buf", "count")

    def __init__(self, buf: bytes = b"", count: int = 0) -> None:
        self.buf = bytearray(buf)
        self.count = count
