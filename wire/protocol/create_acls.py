"""CreateAcls (key 30), versions 0-1 (v2+ is flexible): one result per binding asked for.

    request:  creations[ resource_type int8, resource_name string, [pattern_type int8 (v1+)], principal string,
                         host string, operation int8, permission_type int8 ]
    response: throttle_time_ms int32, results[ error_code int16, error_message nullable string ]
"""

from __future__ import annotations

from ferry.wire.acl_binding import AclBinding
from ferry.wire.protocol.acl_codec import read_binding, write_binding
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer


def parse_request(r: Reader, version: int) -> list[AclBinding]:
    return r.array(lambda r: read_binding(r, version))


def encode_response(version: int, results: list[tuple[int, str | None]]) -> bytes:
    w = Writer().int32(0).array_len(len(results))
    for code, message in results:
        w.error_code(code).string(message)
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side (`ferry acls add`)
CLIENT_VERSION = 1


def encode_request(bindings: list[AclBinding]) -> tuple[int, int, Buffers]:
    w = Writer().array_len(len(bindings))
    for b in bindings:
        write_binding(w, b, CLIENT_VERSION)
    return ApiKey.CREATE_ACLS, CLIENT_VERSION, [w.buf]


def parse_response(body: memoryview | bytes) -> list[tuple[int, str | None]]:
    r = Reader(body)
    r.int32()
    return r.array(lambda r: (r.int16(), r.nullable_string()))
