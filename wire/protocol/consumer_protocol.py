"""The "consumer" protocol embedded in the group protocol's opaque bytes: a member's subscription (JoinGroup
metadata) and its assignment (SyncGroup), as every Kafka consumer encodes them (ConsumerProtocolSubscription /
ConsumerProtocolAssignment, versions 0-3; later versions only append fields, which are skipped here).

The coordinator never looks inside (the leader assigns, client-side); `ferry groups describe` does, to show
who owns which partition."""

from __future__ import annotations

from ferry.wire.protocol.primitives import ProtocolError, Reader


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
