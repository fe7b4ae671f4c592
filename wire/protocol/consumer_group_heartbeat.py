"""ConsumerGroupHeartbeat (key 68, KIP-848's consumer group protocol), versions 0-1, flexible.

A member of a ``group.protocol=consumer`` group sends it every heartbeat interval: its epoch, its subscription
(only when it changed; null otherwise) and the partitions it owns (by topic id); the answer carries its epoch,
the interval, and its assignment when that changed (a nullable struct: -1 is null). v1 adds the subscription
regex (matched against whole topic names; see docs/groups.md); in v1 the member id is the client's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol import flexible
from ferry.wire.protocol.primitives import Reader, Writer

TopicPartitions = list[tuple[bytes, list[int]]]  # [(topic id (16 bytes), partitions)]

LEAVE_EPOCH = -1  # a member leaving the group
STATIC_LEAVE_EPOCH = -2  # a static member leaving for now (it may come back under its instance id)


@dataclass(slots=True)
class ConsumerGroupHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None  # None: unchanged since the last heartbeat
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: TopicPartitions | None = None  # None: unchanged since the last heartbeat


def _topic_partitions(r: Reader) -> tuple[bytes, list[int]]:
    topic_id = r.raw(16)
    parts = flexible.compact_array(r, Reader.int32) or []
    flexible.skip_tagged_fields(r)
    return topic_id, parts


def parse_request(r: Reader, version: int) -> ConsumerGroupHeartbeatRequest:
    flexible.request_body(r)
    req = ConsumerGroupHeartbeatRequest(flexible.compact_string(r), flexible.compact_string(r), r.int32())
    req.instance_id = flexible.compact_nullable_string(r)
    req.rack_id = flexible.compact_nullable_string(r)
    req.rebalance_timeout_ms = r.int32()
    req.subscribed_topic_names = flexible.compact_array(r, flexible.compact_string)
    if version >= 1:
        req.subscribed_topic_regex = flexible.compact_nullable_string(r)
    req.server_assignor = flexible.compact_nullable_string(r)
    req.owned = flexible.compact_array(r, _topic_partitions)
    flexible.skip_tagged_fields(r)
    return req


def _write_topic_partitions(w: Writer, tp: tuple[bytes, list[int]]) -> None:
    w.raw(tp[0])
    flexible.put_compact_array(w, tp[1], Writer.int32)
    flexible.put_tagged_fields(w)


def encode_error_response(error_code: int, error_message: str | None) -> bytes:
    return encode_response(error_code, error_message)


def encode_response(error_code: int, error_message: str | None = None, member_id: str | None = None,
                    member_epoch: int = -1, heartbeat_interval_ms: int = 0,
                    assignment: TopicPartitions | None = None) -> bytes:
    """The same body in v0 and v1; ``assignment`` None: unchanged (null)."""
    w = flexible.response_writer().int32(0).error_code(error_code)  # throttle_time_ms, error_code
    flexible.put_compact_string(w, error_message)
    flexible.put_compact_string(w, member_id)
    w.int32(member_epoch).int32(heartbeat_interval_ms)
    if assignment is None:
        w.int8(-1)
    else:
        w.int8(1)
        flexible.put_compact_array(w, assignment, _write_topic_partitions)
        flexible.put_tagged_fields(w)
    return bytes(flexible.put_tagged_fields(w).buf)
