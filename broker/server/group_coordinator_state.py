"""Consumer groups' membership as their coordinator keeps it in memory (Kafka's GroupMetadata / MemberMetadata,
and GroupMetadataManager, the table of the groups coordinated here).

Data and the few rules that only read it (which protocol the group agrees on, what a member's JoinGroup
answer holds, which broker coordinates a group); the rebalance itself (timers, futures) is
group_coordinator_rebalance.py. Nothing here is persisted: a coordinator that dies takes its groups'
membership with it and the members rejoin at the next coordinator (docs/groups.md); only committed offsets
are durable.

States (Kafka's names, which DescribeGroups reports):

- ``Empty``: no members (offsets may exist);
- ``PreparingRebalance``: waiting for every member to (re)send JoinGroup;
- ``CompletingRebalance``: the generation is formed, waiting for the leader's SyncGroup (assignments);
- ``Stable``: every member has its assignment;
- ``Dead``: removed (deleted, or no longer coordinated here).
"""

from __future__ import annotations

import asyncio
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TypeVar

from ferry.broker.server.metadata_cache import MetadataCache
from ferry.wire.protocol.consumer_protocol import parse_subscription
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.join_group import JoinGroupResponse

T = TypeVar("T")

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"


@dataclass(frozen=True)
class GroupSettings:
    """The coordinator's settings (Kafka's broker names: group.min.session.timeout.ms, ...)."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_metadata_bytes: int = 4_096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3600_000  # offsets.retention.minutes (Kafka's default: 7 days)
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms


def coordinator_for(group_id: str, broker_ids: Iterable[int]) -> int | None:
    """The broker that coordinates ``group_id`` among ``broker_ids`` (None: no broker)."""
    ids = sorted(broker_ids)
    if not ids:
        return None
    return ids[zlib.crc32(group_id.encode("utf-8")) % len(ids)]


# What a member's pending JoinGroup is answered with: the wire's answer itself (no copy of its fields).
JoinResult = JoinGroupResponse


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
class GroupMetadata:
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

    def subscribed_topics(self) -> set[str]:
        """Every topic a member's subscription names (all its protocols: the group may not have chosen one yet);
        what OffsetDelete and offset expiry leave alone while the group has members."""
        out: set[str] = set()
        for m in self.members.values():
            for _name, metadata in m.protocols:
                out.update(parse_subscription(bytes(metadata)))
        return out

    def member_error(self, member_id: str, instance_id: str | None) -> int:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID for a member this group does not know (as it is now)."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is not None and current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members or self.is_(DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

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


class GroupMetadataManager:
    """The groups this broker coordinates now (Kafka's GroupMetadataManager's cache): which groups are here,
    whether a group request may be served here, and the loop their timers and futures run on."""

    def __init__(self, broker_id: int, metadata: MetadataCache) -> None:
        self.broker_id = broker_id
        self.metadata = metadata  # live brokers, topics
        self.groups: dict[str, GroupMetadata] = {}
        self.loop: asyncio.AbstractEventLoop | None = None  # None: not serving (starting, stopping)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def stop(self) -> None:
        self.loop = None

    @property
    def serving(self) -> bool:
        return self.loop is not None

    def get(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def create(self, group_id: str) -> GroupMetadata:
        group = self.groups[group_id] = GroupMetadata(group_id)
        return group

    def validate_group(self, group_id: str) -> int:
        """NONE when this broker coordinates the group now, else the error a group request gets."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if self.loop is None or self.broker_id not in self.metadata.brokers:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE  # starting, stopping, or not registered
        if coordinator_for(group_id, self.metadata.brokers) != self.broker_id:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def coordinated_here(self, group_id: str, live: Iterable[int] | None = None) -> bool:
        """Whether ``group_id`` hashes to this broker among ``live`` (default: the brokers live now)."""
        return coordinator_for(group_id, self.metadata.brokers if live is None else live) == self.broker_id

    def current(self, group: GroupMetadata) -> bool:
        """Is this group object still the one coordinated here (a timer may outlive a dropped group)?"""
        return self.groups.get(group.group_id) is group

    def drop_if_empty(self, group: GroupMetadata) -> None:
        """An Empty group without members is only its offsets (in ZooKeeper): forget it here."""
        if group.is_(EMPTY) and not group.members and not group.pending_members:
            group.cancel_timers()
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]

    def unload(self, group: GroupMetadata, code: int) -> None:
        """Drop the group here, answering its members' waiting JoinGroup and SyncGroup with ``code``."""
        group.cancel_timers()
        for m in group.members.values():
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(JoinResult(code, member_id=m.member_id))
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((code, b""))
        group.state = DEAD
        self.groups.pop(group.group_id, None)

    def time(self) -> float:
        """The loop's clock (timers' deadlines)."""
        assert self.loop is not None
        return self.loop.time()

    def create_future(self) -> asyncio.Future:
        assert self.loop is not None
        return self.loop.create_future()

    def run_in_executor(self, executor: Executor, fn: Callable[..., T], *args: object) -> asyncio.Future[T]:
        """``fn(*args)`` in a worker thread (ZooKeeper calls), awaited on the loop."""
        assert self.loop is not None
        return self.loop.run_in_executor(executor, fn, *args)

    def call_later(self, delay_ms: float, callback: Callable[..., None], *args: object) -> asyncio.TimerHandle:
        assert self.loop is not None
        return self.loop.call_later(max(delay_ms, 0) / 1000.0, callback, *args)
