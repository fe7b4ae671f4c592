"""Kafka's wire primitives for non-flexible versions: big-endian ints, int16-length strings, int32-length
bytes, int32-counted arrays (-1 = null).

Reader works on a memoryview so that record bytes inside a Produce request are handed to the log without a
copy. Writer builds into one bytearray. Both are deliberately small: per-request Python work is the cost.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")

MAX_ARRAY_LEN = 1 << 20  # a request listing more than a million topics/partitions is malformed


# Where the error codes of the answer being encoded are counted: the broker sets a counter for the request's API
# around its handler (Kafka's ErrorsPerSec for every API from one place); None (a client encoding): not counted.
ERROR_SINK: ContextVar[Callable[[int], None] | None] = ContextVar("ferry_error_sink", default=None)


class ProtocolError(ValueError):
    """The bytes do not form a valid request (truncated, negative length, absurd count)."""


class Reader:
    """Sequential reader over one request body."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.buf = buf if isinstance(buf, memoryview) else memoryview(buf)
        self.pos = pos
        self.end = len(self.buf)

    def _need(self, n: int) -> int:
        p = self.pos
        if p + n > self.end:
            raise ProtocolError(f"truncated: need {n} bytes at {p}, have {self.end - p}")
        self.pos = p + n
        return p

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self._need(1))[0]

    def boolean(self) -> bool:
        return self.int8() != 0

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._need(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._need(4))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self._need(8))[0]

    def _sized(self, n: int, what: str) -> memoryview | None:
        """The n bytes after a length field, as a view; None for the null length -1."""
        if n < 0:
            if n != -1:
                raise ProtocolError(f"bad {what} length {n}")
            return None
        p = self._need(n)
        return self.buf[p:p + n]

    def raw(self, n: int) -> bytes:
        """The next n bytes (a Uuid is 16)."""
        p = self._need(n)
        return bytes(self.buf[p:p + n])

    def nullable_string(self) -> str | None:
        b = self._sized(self.int16(), "string")
        if b is None:
            return None
        try:
            return str(b, "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"string is not UTF-8: {e}") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise ProtocolError("null where a string is required")
        return s

    def nullable_bytes(self) -> memoryview | None:
        """int32-length bytes as a view into the request (no copy)."""
        return self._sized(self.int32(), "bytes")

    def array_len(self) -> int:
        """An array's element count; -1 means null."""
        n = self.int32()
        if n < -1 or n > MAX_ARRAY_LEN:
            raise ProtocolError(f"bad array length {n}")
        return n

    def partition_errors(self) -> dict[tuple[str, int], int]:
        """Writer.partition_errors read back: {(topic, partition): error code}."""
        return {(topic, p): code for topic, parts in self.topic_array(_partition_error) for p, code in parts}

    def topic_array(self, read_partition: Callable[[Reader], T]) -> list[tuple[str, list[T]]]:
        """The array of topics, each a name and an array of partitions, that most requests carry:
        [(topic, [read_partition(self)])]."""
        n = self.array_len()
        return [(self.string(), self.array(read_partition)) for _ in range(n)] if n > 0 else []

    def topic_partition_ids(self) -> list[tuple[str, list[int]]]:
        """[(topic, [partition])]: the topic array whose partitions are bare ids."""
        return self.array(_topic_ids)

    def topic_map(self, read_partition: Callable[[Reader], T]) -> dict[str, list[T]]:
        """An answer's topic array as {topic: [read_partition(self)]} (a topic listed twice: one list);
        a null array reads as empty."""
        out: dict[str, list[T]] = {}
        for _ in range(max(self.array_len(), 0)):
            results = out.setdefault(self.string(), [])
            for _ in range(max(self.array_len(), 0)):
                results.append(read_partition(self))
        return out

    def array(self, read_item: Callable[[Reader], T]) -> list[T]:
        n = self.array_len()
        return [read_item(self) for _ in range(n)] if n > 0 else []

    def nullable_array(self, read_item: Callable[[Reader], T]) -> list[T] | None:
        n = self.array_len()
        if n < 0:
            return None
        return [read_item(self) for _ in range(n)]

    def int32_array(self) -> list[int]:
        n = self.array_len()
        if n <= 0:
            return []
        p = self._need(4 * n)
        return list(struct.unpack_from(f">{n}i", self.buf, p))

    def remaining(self) -> int:
        return self.end - self.pos


class Writer:
    """Appends primitives to one bytearray."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def int8(self, v: int) -> Writer:
        self.buf += _I8.pack(v)
        return self

    def boolean(self, v: bool) -> Writer:
        self.buf.append(1 if v else 0)
        return self

    def int16(self, v: int) -> Writer:
        self.buf += _I16.pack(v)
        return self

    def int32(self, v: int) -> Writer:
        self.buf += _I32.pack(v)
        return self

    def error_code(self, code: int) -> Writer:
        """An answer's error code field (int16), counted in ERROR_SINK when it is not NONE."""
        self.buf += _I16.pack(code)
        if code:
            sink = ERROR_SINK.get()
            if sink is not None:
                sink(code)
        return self

    def int64(self, v: int) -> Writer:
        self.buf += _I64.pack(v)
        return self

    def string(self, s: str | None) -> Writer:
        if s is None:
            self.buf += _I16.pack(-1)
        else:
            b = s.encode()
            self.buf += _I16.pack(len(b))
            self.buf += b
        return self

    nullable_string = string

    def bytes_(self, b: bytes | bytearray | memoryview | None) -> Writer:
        if b is None:
            self.buf += _I32.pack(-1)
        else:
            self.buf += _I32.pack(len(b))
            self.buf += b
        return self

    def array_len(self, n: int) -> Writer:
        self.buf += _I32.pack(n)
        return self

    def int32_array(self, values: Iterable[int] | None) -> Writer:
        if values is None:
            self.buf += _I32.pack(-1)
            return self
        vals = list(values)
        self.buf += _I32.pack(len(vals))
        if vals:
            self.buf += struct.pack(f">{len(vals)}i", *vals)
        return self

    def string_array(self, values: Iterable[str] | None) -> Writer:
        """A (nullable) array of strings: topic names, group ids."""
        if values is None:
            return self.array_len(-1)
        vals = list(values)
        self.array_len(len(vals))
        for v in vals:
            self.string(v)
        return self

    def partition_errors(self, topics: Iterable[tuple[str, Iterable[tuple[int, int]]]]) -> Writer:
        """[(topic, [(partition, error code)])]: the per-partition answer of OffsetCommit, AddPartitionsToTxn,
        TxnOffsetCommit and WriteTxnMarkers."""
        return self.topic_array([(topic, list(parts)) for topic, parts in topics], _write_partition_error)

    def topic_partition_ids(self, topics: Sequence[tuple[str, Iterable[int]]]) -> Writer:
        """[(topic, [partition])]: the topic array whose partitions are bare ids."""
        self.array_len(len(topics))
        for name, parts in topics:
            self.string(name).int32_array(parts)
        return self

    def topic_array(self, topics: Sequence[tuple[str, Sequence[T]]],
                    write_partition: Callable[[Writer, T], object]) -> Writer:
        """The array of topics, each a name and an array of partitions, that most requests and answers carry;
        ``write_partition(self, partition)`` writes one partition's fields."""
        self.array_len(len(topics))
        for name, parts in topics:
            self.string(name).array_len(len(parts))
            for p in parts:
                write_partition(self, p)
        return self

    def raw(self, b: bytes | bytearray | memoryview) -> Writer:
        self.buf += b
        return self

    def getvalue(self) -> bytes:
        return bytes(self.buf)


def _topic_ids(r: Reader) -> tuple[str, list[int]]:
    return r.string(), r.int32_array()


def _partition_error(r: Reader) -> tuple[int, int]:
    return r.int32(), r.int16()


def _write_partition_error(w: Writer, partition_error: tuple[int, int]) -> None:
    w.int32(partition_error[0]).error_code(partition_error[1])
