"""SyncGroup (key 14), versions 0-3 (v4+ is flexible; v5's protocol type and name come with flexibility).

The leader sends every member's assignment; every member gets its own back. v1 adds throttle time, v3
group.instance.id.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    assignments: dict[str, bytes]  # member id -> assignment (the leader's request only)


def parse_request(r: Reader, version: int) -> SyncGroupRequest:
    group_id = r.string()
    generation = r.int32()
    member_id = r.string()
    instance_id = r.nullable_string() if version >= 3 else None
    assignments = dict(r.array(lambda r: (r.string(), bytes(r.nullable_bytes() or b""))))
    return SyncGroupRequest(group_id, generation, member_id, instance_id, assignments)


def encode_response(version: int, error_code: int, assignment: bytes = b"") -> bytes:
    w = Writer()
    if version >= 1:
        w.int32(0)  # throttle_time_ms
    return bytes(w.error_code(error_code).bytes_(assignment).buf)
