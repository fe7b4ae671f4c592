"""SaslAuthenticate (key 36), versions 0-2: one SASL token each way. v1 adds session_lifetime_ms (KIP-368): the
client re-authenticates on the same connection before it runs out. v2 is the flexible version (request header
v2 and response header v1 with tagged fields, compact strings and bytes), as Java clients send it."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import ProtocolError, Reader, Writer

FLEXIBLE = 2


@dataclass(slots=True, frozen=True)
class SaslAuthenticateResponse:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0


def _uvarint(r: Reader) -> int:
    value = shift = 0
    while True:
        b = r.int8() & 0xFF
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint longer than 5 bytes")


def _put_uvarint(w: Writer, value: int) -> None:
    while value >= 0x80:
        w.buf.append((value & 0x7F) | 0x80)
        value >>= 7
    w.buf.append(value)


def _skip_tagged_fields(r: Reader) -> None:
    for _ in range(_uvarint(r)):
        _uvarint(r)  # tag
        size = _uvarint(r)
        if size > r.remaining():
            raise ProtocolError("tagged field past the end of the request")
        r.pos += size


def _compact_bytes(r: Reader) -> bytes:
    n = _uvarint(r) - 1
    if n < 0:
        return b""
    if n > r.remaining():
        raise ProtocolError(f"compact bytes of {n} past the end of the request")
    out = bytes(r.buf[r.pos:r.pos + n])
    r.pos += n
    return out


def _put_compact_bytes(w: Writer, b: bytes | None) -> None:
    if b is None:
        w.int8(0)
        return
    _put_uvarint(w, len(b) + 1)
    w.raw(b)


def parse_request(r: Reader, version: int) -> bytes:
    """The token; ``r`` is after the header's client id (v2: the header's tagged fields are skipped here)."""
    if version >= FLEXIBLE:
        _skip_tagged_fields(r)  # request header v2
        token = _compact_bytes(r)
        _skip_tagged_fields(r)
        return token
    token = r.nullable_bytes()
    return bytes(token) if token is not None else b""


def encode_request(token: bytes) -> bytes:
    return bytes(Writer().bytes_(token).buf)


def encode_response(version: int, resp: SaslAuthenticateResponse) -> bytes:
    """The body after the correlation id (v2: the response header's empty tagged fields first)."""
    w = Writer()
    if version >= FLEXIBLE:
        w.int8(0).int16(resp.error_code)
        _put_compact_bytes(w, resp.error_message.encode() if resp.error_message is not None else None)
        _put_compact_bytes(w, resp.auth_bytes)
        return bytes(w.int64(resp.session_lifetime_ms).int8(0).buf)
    w.int16(resp.error_code).string(resp.error_message).bytes_(resp.auth_bytes)
    if version >= 1:
        w.int64(resp.session_lifetime_ms)
    return bytes(w.buf)


def parse_response(r: Reader, version: int) -> SaslAuthenticateResponse:
    if version >= FLEXIBLE:
        _skip_tagged_fields(r)
        code = r.int16()
        message = _compact_bytes(r).decode() or None
        token = _compact_bytes(r)
        lifetime = r.int64()
        _skip_tagged_fields(r)
        return SaslAuthenticateResponse(code, message, token, lifetime)
    code, message, token = r.int16(), r.nullable_string(), r.nullable_bytes()
    lifetime = r.int64() if version >= 1 else 0
    return SaslAuthenticateResponse(code, message, bytes(token or b""), lifetime)


def parse_response_body(body: bytes, version: int) -> SaslAuthenticateResponse:
    return parse_response(Reader(body), version)
