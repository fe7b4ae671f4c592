"""ApiVersions (key 18), versions 0-2. The request body is empty in v0-2.

A v3+ request (flexible) is answered with UNSUPPORTED_VERSION and a v0 body that lists the supported
ranges; the client then retries with a version from that list (KIP-511 fallback).
"""

from __future__ import annotations

from collections.abc import Mapping

from ferry.wire.protocol.primitives import Writer


def encode_response(version: int, error_code: int, ranges: Mapping[int, tuple[int, int]]) -> bytes:
    w = Writer().error_code(error_code).array_len(len(ranges))
    for key in sorted(ranges):
        lo, hi = ranges[key]
        w.int16(key).int16(lo).int16(hi)
    if version >= 1:
        w.int32(0)  # throttle_time_ms
    return bytes(w.buf)
