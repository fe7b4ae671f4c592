"""Request header v1 (api_key, api_version, correlation_id, client_id) and response header v0.

Every version this broker serves is non-flexible, so header v1 is all it parses. A flexible (v2) header
starts with the same fields, which is enough to answer an ApiVersions v3+ request by correlation id.
Clients (the raw client, a broker's replica fetcher) encode the same header with `request_header`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ferry.wire.protocol.primitives import ProtocolError, Reader, Writer

_FIXED = struct.Struct(">hhi")
_CORR = struct.Struct(">i")

# A request body as parts written with one sendmsg: record bytes are referenced, never copied into it.
Buffers = list[bytes | bytearray | memoryview]


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes; raises ProtocolError if short."""
    if len(frame) < 8:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header")
    return _FIXED.unpack_from(frame, 0)


def read_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Reader]:
    """Parse header v1; returns the header and a Reader positioned at the body."""
    api_key, api_version, correlation_id = peek_header(frame)
    r = Reader(frame, 8)
    client_id = r.nullable_string()
    return RequestHeader(api_key, api_version, correlation_id, client_id), r


def request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """Request header v1 for a client's request: api_key, api_version, correlation_id, client_id."""
    return bytes(Writer().int16(api_key).int16(api_version).int32(correlation_id).string(client_id).buf)


def response_header(correlation_id: int) -> bytes:
    """Response header v0: just the correlation id."""
    return _CORR.pack(correlation_id)


__all__ = ["Buffers", "ProtocolError", "RequestHeader", "peek_header", "read_request_header", "request_header",
           "response_header"]
