"""ListGroups (key 16), versions 0-2 (v3+ is flexible; v4's state filter comes with it).

Each broker lists the groups it coordinates; admin clients ask every broker and merge the answers."""

from __future__ import annotations

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.primitives import Reader, Writer


def parse_request(r: Reader, version: int) -> None:
    return None  # no fields before v4


def encode_response(version: int, error_code: int, groups: list[tuple[str, str]]) -> bytes:
    """``groups``: [(group_id, protocol_type)]."""
    w = Writer()
    if version >= 1:
        w.int32(0)  # throttle_time_ms
    w.int16(error_code).array_len(len(groups))
    for group_id, protocol_type in groups:
        w.string(group_id).string(protocol_type)
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side
CLIENT_VERSION = 1


def encode_request() -> tuple[int, int, list]:
    return ApiKey.LIST_GROUPS, CLIENT_VERSION, [b""]


def parse_response(body: memoryview | bytes) -> tuple[int, list[tuple[str, str]]]:
    """(error_code, [(group_id, protocol_type)]) of a v1 answer."""
    r = Reader(body)
    r.int32()  # throttle_time_ms
    code = r.int16()
    return code, r.array(lambda r: (r.string(), r.string()))
