"""DeleteGroups (key 42), versions 0-1 (v2+ is flexible). A group with members is NON_EMPTY_GROUP, an unknown
one GROUP_ID_NOT_FOUND; deleting a group deletes its committed offsets."""

from __future__ import annotations

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.primitives import Reader, Writer


def parse_request(r: Reader, version: int) -> list[str]:
    return r.array(lambda r: r.string())


def encode_response(version: int, results: list[tuple[str, int]]) -> bytes:
    """``results``: [(group_id, error_code)]."""
    w = Writer().int32(0)  # throttle_time_ms (every version)
    w.array_len(len(results))
    for group_id, code in results:
        w.string(group_id).error_code(code)
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side
CLIENT_VERSION = 1


def encode_request(groups: list[str]) -> tuple[int, int, list]:
    return ApiKey.DELETE_GROUPS, CLIENT_VERSION, [Writer().string_array(groups).buf]


def parse_response(body: memoryview | bytes) -> dict[str, int]:
    """{group_id: error_code} of a v1 answer."""
    r = Reader(body)
    r.int32()  # throttle_time_ms
    return dict(r.array(lambda r: (r.string(), r.int16())))
