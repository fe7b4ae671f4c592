"""Wire primitives: round trips and refusal of malformed input (the broker closes the connection on these)."""

from __future__ import annotations

import struct

import pytest

from ferry.wire.protocol.header import peek_header, read_request_header, response_header
from ferry.wire.protocol.primitives import ProtocolError, Reader, Writer


def test_round_trip():
    w = (Writer().int8(-3).boolean(True).int16(-2).int32(1 << 30).int64(-(1 << 62)).string("héllo").string(None)
         .bytes_(b"\x00\x01").bytes_(None).int32_array([1, -1, 7]).int32_array(None))
    r = Reader(w.getvalue())
    assert (r.int8(), r.boolean(), r.int16(), r.int32(), r.int64()) == (-3, True, -2, 1 << 30, -(1 << 62))
    assert (r.string(), r.nullable_string()) == ("héllo", None)
    assert bytes(r.nullable_bytes()) == b"\x00\x01" and r.nullable_bytes() is None
    assert r.int32_array() == [1, -1, 7] and r.nullable_array(Reader.int32) is None
    assert r.remaining() == 0


def test_bytes_are_a_view_not_a_copy():
    buf = bytearray(Writer().bytes_(b"abc").buf)
    view = Reader(buf).nullable_bytes()
    buf[4] = ord("z")
    assert bytes(view) == b"zbc"


@pytest.mark.parametrize("data, read", [
    (b"\x00", Reader.int16),
    (b"\x00\x05ab", Reader.string),
    (b"\xff\xff", Reader.string),  # null where a string is required
    (b"\xff\xfe", Reader.nullable_string),  # -2 is not a length
    (b"\x00\x02\xff\xfe", Reader.string),  # not UTF-8
    (b"\x00\x00\x00\x09abc", Reader.nullable_bytes),
    (b"\xff\xff\xff\xf0", Reader.nullable_bytes),
    (struct.pack(">i", 2_000_000_000), lambda r: r.array(Reader.int32)),
    (struct.pack(">i", -2), lambda r: r.array(Reader.int32)),
    (struct.pack(">i", 3) + b"\x00" * 8, Reader.int32_array),
])
def test_malformed_input_raises_protocol_error(data, read):
    with pytest.raises(ProtocolError):
        read(Reader(data))


def test_request_header_v1_and_response_header_v0():
    frame = struct.pack(">hhi", 3, 8, 1234) + Writer().string("client-1").getvalue() + b"body"
    assert peek_header(frame) == (3, 8, 1234)
    header, r = read_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 8, 1234, "client-1")
    assert bytes(r.buf[r.pos:]) == b"body"
    assert response_header(1234) == struct.pack(">i", 1234)
    with pytest.raises(ProtocolError):
        peek_header(b"\x00\x03\x00")
