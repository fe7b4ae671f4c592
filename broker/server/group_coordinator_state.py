"""A consumer group's membership as its coordinator keeps it in memory (Kafka's GroupMetadata / MemberMetadata).

Pure data and the few rules that only read it (which protocol the group agrees on, what a member's JoinGroup
answer holds); the rebalance itself (timers, futures) is group_coordinator_rebalance.py. Nothing here is
persisted: a coordinator that dies takes its groups' membership with it and the members rejoin at the next
coordinator (docs/groups.md); only committed offsets are durable.

States (Kafka's names, which DescribeGroups reports):

- ``Empty``: no members (offsets may exist);
- ``PreparingRebalance``: waiting for every member to (re)send JoinGroup;
- ``CompletingRebalance``: the generation is formed, waiting for the leader's SyncGroup (assignments);
- ``Stable``: every member has its assignment;
- ``Dead``: removed (deleted, or no longer coordinated here).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"


@dataclass(slots=True)
class JoinResult:
    """What a member's pending JoinGroup is answered with."""

    error_code: int
    generation_id: int = -1
    protocol_name: str = ""
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # [(name, metadata)] in the member's order of preference
    assignment: bytes = b""
    join_future: asyncio.Future | None = None  # a JoinGroup waiting for the join phase to end
    sync_future: asyncio.Future | None = None  # a SyncGroup waiting for the leader's assignments
    heartbeat_timer: asyncio.TimerHandle | None = None
    synced_generation: int = -1  # the last generation this member sent SyncGroup for

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def cancel_heartbeat(self) -> None:
        if self.heartbeat_timer is not None:
            self.heartbeat_timer.cancel()
            self.heartbeat_timer = None


@dataclass(eq=False)
class Group:
    group_id: str
    state: str = EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: dict[str, asyncio.TimerHandle | None] = field(default_factory=dict)  # MEMBER_ID_REQUIRED
    join_timer: asyncio.TimerHandle | None = None  # ends the join phase (rebalance timeout, initial delay)
    sync_timer: asyncio.TimerHandle | None = None  # ends a CompletingRebalance whose leader never synced
    initial_delay_deadline: float = 0.0  # loop time: the initial delay may not extend beyond it
    commit_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # commits of one group in arrival order

    def is_(self, state: str) -> bool:
        return self.state == state

    @property
    def has_members(self) -> bool:
        return bool(self.members)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        member.cancel_heartbeat()
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        if not self.members:
            self.protocol_type = None
        return member

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Can a member with these protocols join? (Kafka: same protocol type, and at least one protocol every
        member supports.)"""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & {name for name, _ in protocols})

    def candidate_protocols(self, members: list[Member] | None = None) -> set[str]:
        """Protocols every member (of ``members``, default all) supports."""
        group = list(self.members.values()) if members is None else members
        if not group:
            return set()
        common = {name for name, _ in group[0].protocols}
        for m in group[1:]:
            common &= {name for name, _ in m.protocols}
        return common

    def select_protocol(self) -> str:
        """Kafka's vote: among the protocols all members support, each member votes for the first of its own
        preference list; the most votes wins (ties: the earlier member's preference)."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        order: list[str] = []
        for m in self.members.values():
            choice = next(name for name, _ in m.protocols if name in candidates)
            votes[choice] += 1
            if choice not in order:
                order.append(choice)
        return max(order, key=lambda name: (votes[name], -order.index(name)))

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def join_result(self, member: Member, error_code: int = 0) -> JoinResult:
        """The JoinGroup answer of the current generation: the leader also gets every member's metadata."""
        protocol = self.protocol_name or ""
        members: list[tuple[str, str | None, bytes]] = []
        if member.member_id == self.leader_id:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(protocol)) for m in self.members.values()]
        return JoinResult(error_code, self.generation_id, protocol, self.leader_id or "", member.member_id, members)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def cancel_timers(self) -> None:
        for handle in (self.join_timer, self.sync_timer, *self.pending_members.values()):
            if handle is not None:
                handle.cancel()
        self.join_timer = self.sync_timer = None
        for m in self.members.values():
            m.cancel_heartbeat()
