"""kafka-python 3's generated codecs as the oracle for ferry's flexible versions (KIP-482): an answer must decode
with compact fields and tagged fields after response header v1's tag section, and re-encode to the same bytes."""

from __future__ import annotations

from ferry.wire.protocol.primitives import Reader


def flexible_roundtrip(cls, ours: bytes, version: int):
    assert ours[0] == 0, "a flexible answer starts with response header v1's empty tagged fields"
    decode = cls._struct.compiled_decode_from(version, compact=True, tagged=True, data_class=cls[None])
    decoded, end = decode(memoryview(ours), 1)
    assert end == len(ours), f"{cls.__name__} v{version}: {len(ours) - end} bytes left over"
    decoded._header = None
    assert b"\0" + bytes(decoded.encode(version=version)) == ours, f"{cls.__name__} v{version} re-encodes differently"
    return decoded


def flexible_body(req, version: int) -> Reader:
    """A flexible request's body after header v2's client id: its (empty) tagged fields, then the fields."""
    return Reader(b"\0" + bytes(req.encode(version=version)))
