"""DeleteAcls (key 31), versions 0-1 (v2+ is flexible): per filter, the bindings it deleted.

    request:  filters[ resource_type int8, resource_name nullable string, [pattern_type int8 (v1+)], principal
                       nullable string, host nullable string, operation int8, permission_type int8 ]
    response: throttle_time_ms int32, filter_results[ error_code int16, error_message nullable string,
              matching_acls[ error_code int16, error_message nullable string, <binding> ] ]
"""

from __future__ import annotations

from ferry.wire.acl_binding import AclBinding, AclBindingFilter
from ferry.wire.protocol.acl_codec import read_binding, read_filter, write_binding, write_filter
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer

FilterResult = tuple[int, str | None, list[AclBinding]]


def parse_request(r: Reader, version: int) -> list[AclBindingFilter]:
    return r.array(lambda r: read_filter(r, version))


def encode_response(version: int, results: list[FilterResult]) -> bytes:
    w = Writer().int32(0).array_len(len(results))
    for code, message, deleted in results:
        w.error_code(code).string(message).array_len(len(deleted))
        for b in deleted:
            w.int16(0).string(None)
            write_binding(w, b, version)
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side (`ferry acls remove`)
CLIENT_VERSION = 1


def encode_request(filters: list[AclBindingFilter]) -> tuple[int, int, Buffers]:
    w = Writer().array_len(len(filters))
    for f in filters:
        write_filter(w, f, CLIENT_VERSION)
    return ApiKey.DELETE_ACLS, CLIENT_VERSION, [w.buf]


def _matching(r: Reader) -> AclBinding:
    r.int16()
    r.nullable_string()
    return read_binding(r, CLIENT_VERSION)


def parse_response(body: memoryview | bytes) -> list[FilterResult]:
    r = Reader(body)
    r.int32()
    return r.array(lambda r: (r.int16(), r.nullable_string(), r.array(_matching)))
