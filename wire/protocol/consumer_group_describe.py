"""ConsumerGroupDescribe (key 69, KIP-848), version 0, flexible: each group's state, epochs, assignor, and per
member its epoch, subscription, current assignment and target assignment (topics by id and name)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.wire.protocol import flexible
from ferry.wire.protocol.primitives import Reader, Writer

NamedPartitions = list[tuple[bytes, str, list[int]]]  # [(topic id, topic name, partitions)]


def parse_request(r: Reader, version: int) -> list[str]:
    """The group ids asked for (include_authorized_operations is read and not computed)."""
    flexible.request_body(r)
    groups = flexible.compact_array(r, flexible.compact_string) or []
    r.boolean()
    flexible.skip_tagged_fields(r)
    return groups


@dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: NamedPartitions
    target_assignment: NamedPartitions


@dataclass(slots=True)
class ConsumerGroupDescription:
    error_code: int
    group_id: str
    error_message: str | None = None
    state: str = "Dead"
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor_name: str = ""
    members: list[ConsumerGroupMember] = field(default_factory=list)


def _write_named(w: Writer, tp: tuple[bytes, str, list[int]]) -> None:
    w.raw(tp[0])
    flexible.put_compact_string(w, tp[1])
    flexible.put_compact_array(w, tp[2], Writer.int32)
    flexible.put_tagged_fields(w)


def _write_assignment(w: Writer, parts: NamedPartitions) -> None:
    flexible.put_compact_array(w, parts, _write_named)
    flexible.put_tagged_fields(w)


def _write_member(w: Writer, m: ConsumerGroupMember) -> None:
    flexible.put_compact_string(w, m.member_id)
    flexible.put_compact_string(w, m.instance_id)
    flexible.put_compact_string(w, m.rack_id)
    w.int32(m.member_epoch)
    flexible.put_compact_string(w, m.client_id)
    flexible.put_compact_string(w, m.client_host)
    flexible.put_compact_array(w, m.subscribed_topic_names, flexible.put_compact_string)
    flexible.put_compact_string(w, m.subscribed_topic_regex)
    _write_assignment(w, m.assignment)
    _write_assignment(w, m.target_assignment)
    flexible.put_tagged_fields(w)


def _write_group(w: Writer, g: ConsumerGroupDescription) -> None:
    w.error_code(g.error_code)
    flexible.put_compact_string(w, g.error_message)
    flexible.put_compact_string(w, g.group_id)
    flexible.put_compact_string(w, g.state)
    w.int32(g.group_epoch).int32(g.assignment_epoch)
    flexible.put_compact_string(w, g.assignor_name)
    flexible.put_compact_array(w, g.members, _write_member)
    w.int32(-2147483648)  # authorized_operations: not computed
    flexible.put_tagged_fields(w)


def encode_response(groups: list[ConsumerGroupDescription]) -> bytes:
    w = flexible.response_writer().int32(0)  # throttle_time_ms
    flexible.put_compact_array(w, groups, _write_group)
    return bytes(flexible.put_tagged_fields(w).buf)
