"""Request header v1 (api_key, api_version, correlation_id, client_id) and response header v0.

Every version this broker serves is non-flexible, so header v1 is all it parses. A flexible (v2) header
starts with the same fields, which is enough to answer an ApiVersions v3+ request by correlation id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ferry.wire.protocol.primitives import ProtocolError, Reader

_FIXED = struct.Struct(">hhi")
_CORR = struct.Struct(">i")


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


def response_header(correlation_id: int) -> bytes:
    """Response header v0: just the correlation id."""
    return _CORR.pack(correlation_id)


__all__ = ["ProtocolError", "RequestHeader", "peek_header", "read_request_header", "response_header"]
