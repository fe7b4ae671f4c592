"""DescribeGroups (key 15), versions 0-4 (v5+ is flexible).

v1 adds throttle time, v3 include_authorized_operations (answered "not provided": ferry has no ACLs), v4 each
member's group.instance.id. A group this broker does not know is answered state "Dead" with no error, as
Kafka does; one it does not coordinate with NOT_COORDINATOR."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.primitives import Reader, Writer

AUTHORIZED_OPERATIONS_OMITTED = -2147483648


@dataclass(slots=True)
class DescribeGroupsRequest:
    groups: list[str]
    include_authorized_operations: bool = False


def parse_request(r: Reader, version: int) -> DescribeGroupsRequest:
    groups = r.array(Reader.string)
    return DescribeGroupsRequest(groups, version >= 3 and r.boolean())  # include_authorized_operations


@dataclass(slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class DescribedGroup:
    error_code: int
    group_id: str
    state: str = "Dead"
    protocol_type: str = ""
    protocol: str = ""
    members: list[DescribedMember] = field(default_factory=list)


def encode_response(version: int, groups: list[DescribedGroup]) -> bytes:
    w = Writer()
    if version >= 1:
        w.int32(0)  # throttle_time_ms
    w.array_len(len(groups))
    for g in groups:
        w.error_code(g.error_code).string(g.group_id).string(g.state).string(g.protocol_type).string(g.protocol)
        w.array_len(len(g.members))
        for m in g.members:
            w.string(m.member_id)
            if version >= 4:
                w.string(m.group_instance_id)
            w.string(m.client_id).string(m.client_host).bytes_(m.metadata).bytes_(m.assignment)
        if version >= 3:
            w.int32(AUTHORIZED_OPERATIONS_OMITTED)
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side
CLIENT_VERSION = 1


def encode_request(groups: list[str]) -> tuple[int, int, list]:
    return ApiKey.DESCRIBE_GROUPS, CLIENT_VERSION, [Writer().string_array(groups).buf]


def parse_response(body: memoryview | bytes) -> list[DescribedGroup]:
    """The groups of a v1 answer."""
    r = Reader(body)
    r.int32()  # throttle_time_ms

    def member(r: Reader) -> DescribedMember:
        return DescribedMember(r.string(), None, r.string(), r.string(), bytes(r.nullable_bytes() or b""),
                               bytes(r.nullable_bytes() or b""))

    def group(r: Reader) -> DescribedGroup:
        code, gid, state, ptype, protocol = r.int16(), r.string(), r.string(), r.string(), r.string()
        return DescribedGroup(code, gid, state, ptype, protocol, r.array(member))

    return r.array(group)
