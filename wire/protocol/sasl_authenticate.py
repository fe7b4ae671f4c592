"""SaslAuthenticate (key 36), versions 0-2: one SASL token each way. v1 adds session_lifetime_ms (KIP-368): the
client re-authenticates on the same connection before it runs out. v2 is the flexible version (request header
v2 and response header v1 with tagged fields, compact strings and bytes), as Java clients send it."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.flexible import compact_bytes, put_compact_bytes, skip_tagged_fields
from ferry.wire.protocol.primitives import Reader, Writer

FLEXIBLE = 2


@dataclass(slots=True, frozen=True)
class SaslAuthenticateResponse:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0


def parse_request(r: Reader, version: int) -> bytes:
    """The token; ``r`` is after the header's client id (v2: the header's tagged fields are skipped here)."""
    if version >= FLEXIBLE:
        skip_tagged_fields(r)  # request header v2
        token = (compact_bytes(r) or b"")
        skip_tagged_fields(r)
        return token
    token = r.nullable_bytes()
    return bytes(token) if token is not None else b""


def encode_request(token: bytes) -> bytes:
    return bytes(Writer().bytes_(token).buf)


def encode_response(version: int, resp: SaslAuthenticateResponse) -> bytes:
    """The body after the correlation id (v2: the response header's empty tagged fields first)."""
    w = Writer()
    if version >= FLEXIBLE:
        w.int8(0).error_code(resp.error_code)
        put_compact_bytes(w, resp.error_message.encode() if resp.error_message is not None else None)
        put_compact_bytes(w, resp.auth_bytes)
        return bytes(w.int64(resp.session_lifetime_ms).int8(0).buf)
    w.error_code(resp.error_code).string(resp.error_message).bytes_(resp.auth_bytes)
    if version >= 1:
        w.int64(resp.session_lifetime_ms)
    return bytes(w.buf)


def parse_response(r: Reader, version: int) -> SaslAuthenticateResponse:
    if version >= FLEXIBLE:
        skip_tagged_fields(r)
        code = r.int16()
        message = (compact_bytes(r) or b"").decode() or None
        token = (compact_bytes(r) or b"")
        lifetime = r.int64()
        skip_tagged_fields(r)
        return SaslAuthenticateResponse(code, message, token, lifetime)
    code, message, token = r.int16(), r.nullable_string(), r.nullable_bytes()
    lifetime = r.int64() if version >= 1 else 0
    return SaslAuthenticateResponse(code, message, bytes(token or b""), lifetime)


def parse_response_body(body: bytes, version: int) -> SaslAuthenticateResponse:
    return parse_response(Reader(body), version)
