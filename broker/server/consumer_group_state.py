"""A KIP-848 consumer group's state (ConsumerGroup, ConsumerMember) and its persisted form.

Kafka keeps this state in ``__consumer_offsets`` (ConsumerGroupMetadata, ConsumerGroupMemberMetadata,
ConsumerGroupTargetAssignment*, ConsumerGroupCurrentMemberAssignment records) so that a coordinator restart or
move keeps the group epoch, the target assignment and each member's epoch and partitions. ferry keeps the same
facts in the group's znode in ZooKeeper, beside its committed offsets (consumer_group_store.py): ``to_doc`` and
``from_doc`` convert. Timers are not state: a loaded member's session starts again at load.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import re2

from ferry.broker.server.consumer_group_assignors import Assignment, TopicPartition

STATE_VERSION = 1
LEAVE_STATIC_EPOCH = -2  # a static member's leave: its instance id and partitions are kept for its return


def compile_regex(pattern: str) -> re2._Regexp:
    """RE2, as Kafka's RE2J: linear-time matching, so no member's pattern can stall the event loop."""
    options = re2.Options()
    options.log_errors = False  # a bad pattern is the member's error (INVALID_REGULAR_EXPRESSION), not the broker's
    return re2.compile(pattern, options)


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    client_id: str
    client_host: str
    instance_id: str | None = None
    rack_id: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    subscription: frozenset[str] = frozenset()  # topic names
    regex: re2._Regexp | None = None  # a subscription by regular expression (v1), matched against every topic
    assignor: str | None = None
    assigned: set[TopicPartition] = field(default_factory=set)  # what the member was told it owns
    revoking: set[TopicPartition] = field(default_factory=set)  # taken away, not yet confirmed released
    last_sent: frozenset[TopicPartition] | None = None
    rebalance_timeout_ms: int = 300_000  # the member's max.poll.interval.ms: how long it may take to release
    left_static: bool = False  # a static member that left with epoch -2: its place waits for its instance id
    expiry: asyncio.TimerHandle | None = None
    release_deadline: asyncio.TimerHandle | None = None  # armed while it has partitions to release

    def cancel_timers(self) -> None:
        for timer in (self.expiry, self.release_deadline):
            if timer is not None:
                timer.cancel()
        self.expiry = self.release_deadline = None

    def persisted(self) -> tuple:
        """What of the member is persisted (a heartbeat that changes none of it writes nothing)."""
        return (self.epoch, self.previous_epoch, frozenset(self.assigned), frozenset(self.revoking),
                self.subscription, self.regex.pattern if self.regex else None, self.assignor, self.rebalance_timeout_ms,
                self.left_static, self.instance_id, self.rack_id)


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    target_epoch: int = 0
    assignor: str = ""
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: Assignment = field(default_factory=dict)
    partition_counts: dict[str, int] = field(default_factory=dict)  # of the subscribed topics, at the target

    @property
    def state(self) -> str:
        """KIP-848's states: Empty, Assigning (target behind the group epoch), Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.target_epoch < self.epoch:
            return "Assigning"
        if any(m.epoch != self.target_epoch or m.revoking for m in self.members.values() if not m.left_static):
            return "Reconciling"
        return "Stable"

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)


def _partitions(tps: set[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return out


def _tps(doc: object) -> set[TopicPartition]:
    if not isinstance(doc, dict):
        return set()
    return {(str(t), int(p)) for t, ps in doc.items() if isinstance(ps, list) for p in ps if isinstance(p, int)}


def to_doc(group: ConsumerGroup) -> dict:
    """The group as stored (JSON): epochs, assignor, partition counts, target assignment, members."""
    members = {}
    for m in group.members.values():
        members[m.member_id] = {
            "client_id": m.client_id, "client_host": m.client_host, "instance_id": m.instance_id,
            "rack_id": m.rack_id, "epoch": m.epoch, "previous_epoch": m.previous_epoch,
            "subscription": sorted(m.subscription), "regex": m.regex.pattern if m.regex else None,
            "assignor": m.assignor, "rebalance_timeout_ms": m.rebalance_timeout_ms, "left_static": m.left_static,
            "assigned": _partitions(m.assigned), "revoking": _partitions(m.revoking)}
    return {"version": STATE_VERSION, "epoch": group.epoch, "target_epoch": group.target_epoch,
            "assignor": group.assignor, "partition_counts": dict(sorted(group.partition_counts.items())),
            "target": {mid: _partitions(tps) for mid, tps in sorted(group.target.items())}, "members": members}


def from_doc(group_id: str, doc: dict) -> ConsumerGroup:
    """The group back from its stored form; ValueError if the document is not one."""
    if not isinstance(doc, dict) or not isinstance(doc.get("epoch"), int) or not isinstance(doc.get("members"), dict):
        raise ValueError(f"consumer group {group_id!r}: stored state is not a consumer group ({str(doc)[:80]})")
    group = ConsumerGroup(group_id, doc["epoch"], int(doc.get("target_epoch", 0)), str(doc.get("assignor") or ""))
    group.partition_counts = {str(t): int(n) for t, n in (doc.get("partition_counts") or {}).items()}
    group.target = {str(mid): _tps(tps) for mid, tps in (doc.get("target") or {}).items()}
    for mid, m in doc["members"].items():
        regex = m.get("regex")
        member = ConsumerMember(str(mid), str(m.get("client_id") or ""), str(m.get("client_host") or ""),
                                m.get("instance_id"), m.get("rack_id"), int(m.get("epoch", 0)),
                                int(m.get("previous_epoch", -1)), frozenset(m.get("subscription") or ()),
                                compile_regex(regex) if regex else None, m.get("assignor"),
                                _tps(m.get("assigned")), _tps(m.get("revoking")),
                                rebalance_timeout_ms=int(m.get("rebalance_timeout_ms", 300_000)),
                                left_static=bool(m.get("left_static")))
        member.last_sent = frozenset(member.assigned)  # what it was last told (an unchanged answer omits it)
        group.members[member.member_id] = member
    return group
