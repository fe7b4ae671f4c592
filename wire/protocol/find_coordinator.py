"""FindCoordinator (key 10), versions 0-2 (v3+ is flexible).

v0 names a group; v1 adds the key type (0 = group, 1 = transactional id) and the response's throttle time and
error message. Every broker answers the same coordinator for a group (ferry.broker.server.group_placement),
so a client may ask any of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.primitives import Reader, Writer

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


@dataclass(slots=True, frozen=True)
class FindCoordinatorRequest:
    key: str
    key_type: int = KEY_TYPE_GROUP


def parse_request(r: Reader, version: int) -> FindCoordinatorRequest:
    key = r.string()
    key_type = r.int8() if version >= 1 else KEY_TYPE_GROUP
    return FindCoordinatorRequest(key, key_type)


def encode_response(version: int, error_code: int, node_id: int = -1, host: str = "", port: int = -1,
                    error_message: str | None = None) -> bytes:
    w = Writer()
    if version >= 1:
        w.int32(0)  # throttle_time_ms
    w.error_code(error_code)
    if version >= 1:
        w.string(error_message)
    return bytes(w.int32(node_id).string(host).int32(port).buf)


# ---------------------------------------------------------------------- client side
CLIENT_VERSION = 1


def encode_request(key: str, key_type: int = KEY_TYPE_GROUP) -> tuple[int, int, list]:
    return ApiKey.FIND_COORDINATOR, CLIENT_VERSION, [Writer().string(key).int8(key_type).buf]


def parse_response(body: memoryview | bytes) -> tuple[int, str | None, int, str, int]:
    """(error_code, error_message, node_id, host, port) of a v1 answer."""
    r = Reader(body)
    r.int32()  # throttle_time_ms
    return r.int16(), r.nullable_string(), r.int32(), r.string(), r.int32()
