"""The "consumer" protocol embedded in the group protocol's opaque bytes: a member's subscription (JoinGroup
metadata) and its assignment (SyncGroup), as every Kafka consumer encodes them (ConsumerProtocolSubscription /
ConsumerProtocolAssignment, versions 0-3; later versions only append fields, which are skipped here).

The classic coordinator never looks inside (the leader assigns, client-side); `ferry groups describe` does, to
show who owns which partition. The encoders (version 0) let DescribeGroups show a KIP-848 group's members the
way classic tools read them."""

from __future__ import annotations

from ferry.wire.protocol.primitives import ProtocolError, Reader, Writer


def parse_subscription(data: bytes) -> list[str]:
    """The topics a member subscribes to ([] for bytes that are not a consumer subscription)."""
    try:
        r = Reader(data)
        r.int16()  # version
        return r.array(lambda r: r.string())
    except ProtocolError:
        return []


def parse_assignment(data: bytes) -> dict[str, list[int]]:
    """{topic: [partition]} of a member's assignment ({} when empty or not a consumer assignment)."""
    if not data:
        return {}
    try:
        r = Reader(data)
        r.int16()  # version
        return dict(r.array(lambda r: (r.string(), r.int32_array())))
    except ProtocolError:
        return {}


def encode_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: the topics, no user data."""
    return bytes(Writer().int16(0).string_array(sorted(topics)).bytes_(None).buf)


def encode_assignment(assignment: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: {topic: [partition]}, no user data."""
    w = Writer().int16(0).array_len(len(assignment))
    for topic in sorted(assignment):
        w.string(topic).int32_array(sorted(assignment[topic]))
    return bytes(w.bytes_(None).buf)
