"""DescribeAcls (key 29), versions 0-1 (v2+ is flexible): the ACL bindings a filter selects, grouped by resource.

    request:  resource_type int8, resource_name nullable string, [pattern_type int8 (v1+)], principal nullable
              string, host nullable string, operation int8, permission_type int8
    response: throttle_time_ms int32, error_code int16, error_message nullable string,
              resources[ resource_type int8, resource_name string, [pattern_type int8 (v1+)],
                         acls[ principal, host, operation int8, permission_type int8 ] ]
"""

from __future__ import annotations

from ferry.wire.acl_binding import AclBinding, AclBindingFilter, ResourcePattern
from ferry.wire.protocol.acl_codec import read_entry, read_filter, write_entry, write_filter
from ferry.wire.protocol.acl_types import PatternType, ResourceType
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer


def parse_request(r: Reader, version: int) -> AclBindingFilter:
    return read_filter(r, version)


def encode_response(version: int, error_code: int, error_message: str | None, bindings: list[AclBinding]) -> bytes:
    by_pattern: dict[ResourcePattern, list] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    w = Writer().int32(0).error_code(error_code).string(error_message)
    w.array_len(len(by_pattern))
    for pattern, entries in by_pattern.items():
        w.int8(pattern.resource_type).string(pattern.name)
        if version >= 1:
            w.int8(pattern.pattern_type)
        w.array_len(len(entries))
        for e in entries:
            write_entry(w, e)
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side (`ferry acls list`)
CLIENT_VERSION = 1


def encode_request(f: AclBindingFilter) -> tuple[int, int, Buffers]:
    w = Writer()
    write_filter(w, f, CLIENT_VERSION)
    return ApiKey.DESCRIBE_ACLS, CLIENT_VERSION, [w.buf]


def parse_response(body: memoryview | bytes) -> tuple[int, str | None, list[AclBinding]]:
    r = Reader(body)
    r.int32()
    code, message = r.int16(), r.nullable_string()
    out: list[AclBinding] = []
    for _ in range(max(r.array_len(), 0)):
        rtype, name, pattern = ResourceType(r.int8()), r.string(), PatternType(r.int8())
        p = ResourcePattern(rtype, name, pattern)
        out.extend(AclBinding(p, e) for e in r.array(read_entry))
    return code, message, out
