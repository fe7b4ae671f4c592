"""Kafka's flexible versions (KIP-482): unsigned varints, compact strings, bytes and arrays (length + 1, 0 =
null), and tagged fields after every struct. primitives.py holds the older fixed-width forms; these are the
one place for the compact ones (every flexible API's codec uses them).

A flexible request has header v2 (header v1's fields, then tagged fields: ``request_body`` skips them); its
answer has response header v1, the correlation id then tagged fields: ``response_writer`` starts a body with
that empty tag section (the connection writes the correlation id itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from ferry.wire.protocol.primitives import ProtocolError, Reader, Writer

T = TypeVar("T")


def uvarint(r: Reader) -> int:
    value = shift = 0
    while True:
        b = r.int8() & 0xFF
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint longer than 5 bytes")


def put_uvarint(w: Writer, value: int) -> Writer:
    while value >= 0x80:
        w.buf.append((value & 0x7F) | 0x80)
        value >>= 7
    w.buf.append(value)
    return w


def skip_tagged_fields(r: Reader) -> None:
    """Tagged fields this side does not know are skipped, as Kafka does."""
    for _ in range(uvarint(r)):
        uvarint(r)  # tag
        size = uvarint(r)
        if size > r.remaining():
            raise ProtocolError("tagged field past the end of the request")
        r.pos += size


def put_tagged_fields(w: Writer) -> Writer:
    """An empty tagged-field section (ferry sets no tagged field)."""
    w.buf.append(0)
    return w


def compact_bytes(r: Reader) -> bytes | None:
    n = uvarint(r) - 1
    if n < 0:
        return None
    if n > r.remaining():
        raise ProtocolError(f"compact bytes of {n} past the end of the request")
    out = bytes(r.buf[r.pos:r.pos + n])
    r.pos += n
    return out


def put_compact_bytes(w: Writer, b: bytes | None) -> Writer:
    if b is None:
        return put_uvarint(w, 0)
    put_uvarint(w, len(b) + 1)
    return w.raw(b)


def compact_nullable_string(r: Reader) -> str | None:
    b = compact_bytes(r)
    if b is None:
        return None
    try:
        return b.decode()
    except UnicodeDecodeError as e:
        raise ProtocolError(f"string is not UTF-8: {e}") from None


def compact_string(r: Reader) -> str:
    s = compact_nullable_string(r)
    if s is None:
        raise ProtocolError("null where a string is required")
    return s


def put_compact_string(w: Writer, s: str | None) -> Writer:
    return put_compact_bytes(w, None if s is None else s.encode())


def compact_array(r: Reader, read_item: Callable[[Reader], T]) -> list[T] | None:
    """A compact array (None for null); each item is read by ``read_item`` (which reads its tagged fields)."""
    n = uvarint(r) - 1
    if n < 0:
        return None
    if n > r.remaining():
        raise ProtocolError(f"array of {n} items past the end of the request")
    return [read_item(r) for _ in range(n)]


def put_compact_array(w: Writer, items: Iterable[T] | None, write_item: Callable[[Writer, T], object]) -> Writer:
    if items is None:
        return put_uvarint(w, 0)
    items = list(items)
    put_uvarint(w, len(items) + 1)
    for item in items:
        write_item(w, item)
    return w


def request_body(r: Reader) -> Reader:
    """``r`` (after the header's client id) past the request header v2's tagged fields."""
    skip_tagged_fields(r)
    return r


def response_writer() -> Writer:
    """A Writer for a flexible answer: response header v1's (empty) tagged fields come first."""
    return put_tagged_fields(Writer())
