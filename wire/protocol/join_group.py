"""JoinGroup (key 11), versions 0-5 (v6+ is flexible).

v1 adds the rebalance timeout (v0: the session timeout is also the rebalance timeout), v2 the response's
throttle time, v4 means the client handles MEMBER_ID_REQUIRED (KIP-394), v5 adds group.instance.id (static
membership, KIP-345) to the request and to each member of the response.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # [(name, metadata)] in the member's order of preference


def parse_request(r: Reader, version: int) -> JoinGroupRequest:
    group_id = r.string()
    session_timeout = r.int32()
    rebalance_timeout = r.int32() if version >= 1 else session_timeout
    member_id = r.string()
    instance_id = r.nullable_string() if version >= 5 else None
    protocol_type = r.string()
    protocols = r.array(lambda r: (r.string(), bytes(r.nullable_bytes() or b"")))
    return JoinGroupRequest(group_id, session_timeout, rebalance_timeout, member_id, instance_id, protocol_type,
                            protocols)


@dataclass(slots=True)
class JoinGroupResponse:
    error_code: int
    generation_id: int = -1
    protocol_name: str = ""
    leader: str = ""
    member_id: str = ""
    # (member_id, group_instance_id, metadata): filled for the leader only
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


def encode_response(version: int, resp: JoinGroupResponse) -> bytes:
    w = Writer()
    if version >= 2:
        w.int32(0)  # throttle_time_ms
    w.error_code(resp.error_code).int32(resp.generation_id).string(resp.protocol_name).string(resp.leader)
    w.string(resp.member_id).array_len(len(resp.members))
    for member_id, instance_id, metadata in resp.members:
        w.string(member_id)
        if version >= 5:
            w.string(instance_id)
        w.bytes_(metadata)
    return bytes(w.buf)
