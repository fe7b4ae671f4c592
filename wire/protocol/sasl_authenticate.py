"""SaslAuthenticate (key 36), versions 0-1 (v2 is flexible): one SASL token each way. v1 adds
session_lifetime_ms (KIP-368): the client re-authenticates on the same connection before it runs out."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True, frozen=True)
class SaslAuthenticateResponse:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0


def parse_request(r: Reader, version: int) -> bytes:
    token = r.nullable_bytes()
    return bytes(token) if token is not None else b""


def encode_request(token: bytes) -> bytes:
    return bytes(Writer().bytes_(token).buf)


def encode_response(version: int, resp: SaslAuthenticateResponse) -> bytes:
    w = Writer().int16(resp.error_code).string(resp.error_message).bytes_(resp.auth_bytes)
    if version >= 1:
        w.int64(resp.session_lifetime_ms)
    return bytes(w.buf)


def parse_response(r: Reader, version: int) -> SaslAuthenticateResponse:
    code, message, token = r.int16(), r.nullable_string(), r.nullable_bytes()
    lifetime = r.int64() if version >= 1 else 0
    return SaslAuthenticateResponse(code, message, bytes(token or b""), lifetime)


def parse_response_body(body: bytes, version: int) -> SaslAuthenticateResponse:
    return parse_response(Reader(body), version)
