"""SaslHandshake (key 17), versions 0-1: the client names its SASL mechanism; the answer lists the enabled
ones. After v0 the tokens follow as raw size-prefixed frames; after v1 they travel in SaslAuthenticate."""

from __future__ import annotations

from collections.abc import Iterable

from ferry.wire.protocol.primitives import Reader, Writer


def parse_request(r: Reader, version: int) -> str:
    return r.string()


def encode_request(mechanism: str) -> bytes:
    return bytes(Writer().string(mechanism).buf)


def encode_response(version: int, error_code: int, mechanisms: Iterable[str]) -> bytes:
    w = Writer().error_code(error_code)
    names = list(mechanisms)
    w.array_len(len(names))
    for m in names:
        w.string(m)
    return bytes(w.buf)


def parse_response(r: Reader) -> tuple[int, list[str]]:
    code = r.int16()
    return code, [r.string() for _ in range(r.array_len())]
