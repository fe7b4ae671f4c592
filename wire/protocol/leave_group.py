"""LeaveGroup (key 13), versions 0-3 (v4+ is flexible).

v0-2 name one member; v3 (KIP-345) a batch of (member id, group.instance.id) with an error per member, which
is how an admin removes static members."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class LeaveGroupRequest:
    group_id: str
    members: list[tuple[str, str | None]]  # [(member_id, group_instance_id)]


def parse_request(r: Reader, version: int) -> LeaveGroupRequest:
    group_id = r.string()
    if version >= 3:
        members = r.array(lambda r: (r.string(), r.nullable_string()))
    else:
        members = [(r.string(), None)]
    return LeaveGroupRequest(group_id, members)


def encode_response(version: int, error_code: int,
                    members: list[tuple[str, str | None, int]] | None = None) -> bytes:
    """``members``: [(member_id, group_instance_id, error_code)], v3+ only."""
    w = Writer()
    if version >= 1:
        w.int32(0)  # throttle_time_ms
    w.error_code(error_code)
    if version >= 3:
        rows = members or []
        w.array_len(len(rows))
        for member_id, instance_id, code in rows:
            w.string(member_id).string(instance_id).error_code(code)
    return bytes(w.buf)
