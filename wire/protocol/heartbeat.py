"""Heartbeat (key 12), versions 0-3 (v4+ is flexible). v1 adds throttle time, v3 group.instance.id.

The answer is how a member learns of a rebalance (REBALANCE_IN_PROGRESS) or that it was dropped
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION)."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True, frozen=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


def parse_request(r: Reader, version: int) -> HeartbeatRequest:
    group_id = r.string()
    generation = r.int32()
    member_id = r.string()
    instance_id = r.nullable_string() if version >= 3 else None
    return HeartbeatRequest(group_id, generation, member_id, instance_id)


def encode_response(version: int, error_code: int) -> bytes:
    w = Writer()
    if version >= 1:
        w.int32(0)  # throttle_time_ms
    return bytes(w.error_code(error_code).buf)
