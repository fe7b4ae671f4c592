"""GroupCoordinator: the broker side of Kafka's classic consumer group protocol (docs/groups.md).

Which broker coordinates a group is a pure function of the group id and the live brokers
(``coordinator_for``: sorted live ids, crc32(group) mod their count), so every broker answers FindCoordinator
alike without talking to the others, and when the coordinator dies (its /brokers/ids node goes) its groups
move to the survivors. Membership (members, generation, protocol, leader, assignments) lives in memory here,
as in Kafka; a coordinator that loses a group (dies, or a broker joins and the group hashes elsewhere) drops
it and its members rejoin at the new one under a new generation. Committed offsets live in ZooKeeper
(ferry.zk.group_offsets), so they survive any broker.

GroupCoordinator routes each request to the collaborator that owns its state: GroupMetadataManager (the
groups here, group_coordinator_state.py), GroupRebalancer (JoinGroup, SyncGroup), MemberLiveness (Heartbeat,
LeaveGroup, session timeouts), GroupOffsetStore (OffsetCommit, OffsetFetch); it keeps the admin requests
(ListGroups, DescribeGroups, DeleteGroups) and follows the live brokers. Everything runs on the broker's
event loop; ZooKeeper calls in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import TypeVar

from kazoo.client import KazooClient

from ferry.broker.server.consumer_group_coordinator import ConsumerGroupCoordinator, ConsumerGroupSettings
from ferry.broker.server.consumer_group_persistence import ConsumerGroupPersistence
from ferry.broker.server.consumer_group_store import ConsumerGroupStore
from ferry.broker.server.group_coordinator_liveness import MemberLiveness
from ferry.broker.server.group_coordinator_offsets import CommitResults, GroupOffsetStore
from ferry.broker.server.group_coordinator_rebalance import GroupRebalancer
from ferry.broker.server.group_coordinator_state import (
    DEAD,
    EMPTY,
    GroupMetadata,
    GroupMetadataManager,
    GroupSettings,
    JoinResult,
    coordinator_for,
)
from ferry.broker.server.group_offset_expiry import OffsetExpiry
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.wire.protocol.describe_groups import DescribedGroup, DescribedMember
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.join_group import JoinGroupRequest
from ferry.wire.protocol.offset_commit import OffsetCommitRequest
from ferry.wire.protocol.offset_fetch import FetchedOffset
from ferry.zk import group_offsets
from ferry.zk.znodes import BrokerInfo

T = TypeVar("T")

# GroupSettings and coordinator_for are defined with the state (group_coordinator_state.py); callers import
# them from here
__all__ = ["GroupCoordinator", "GroupSettings", "coordinator_for"]

log = logging.getLogger(__name__)

OffsetFetchResult = tuple[int, list[tuple[str, list[FetchedOffset]]]]


class GroupCoordinator:
    """Routes group requests to the collaborators that own the state; follows the live brokers."""

    def __init__(self, broker_id: int, metadata: MetadataCache, zk_client: Callable[[], KazooClient],
                 executor: Executor, settings: GroupSettings | None = None,
                 consumer_settings: ConsumerGroupSettings | None = None) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.zk_client = zk_client
        self.executor = executor
        self.settings = settings or GroupSettings()
        self._groups = GroupMetadataManager(broker_id, metadata)
        self._liveness = MemberLiveness(self._groups, self._after_departure)
        self._rebalancer = GroupRebalancer(self._groups, self.settings, self._liveness)
        self._offsets = GroupOffsetStore(self._groups, self.settings, zk_client, executor, self._liveness)
        self._expiry = OffsetExpiry(self._groups, self.settings, zk_client, executor)
        # KIP-848's consumer protocol: its groups beside the classic ones, same placement, same offsets
        self.consumer_groups = ConsumerGroupCoordinator(metadata, consumer_settings)
        # ...their state persisted in ZooKeeper beside the offsets, loaded where they are coordinated next
        self.consumer_persistence = ConsumerGroupPersistence(self.consumer_groups,
                                                             ConsumerGroupStore(zk_client, executor))

    @property
    def groups(self) -> dict[str, GroupMetadata]:
        """The groups coordinated here now, by id."""
        return self._groups.groups

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._groups.start(loop)
        self._expiry.start(loop)
        self.metadata.add_brokers_listener(self._on_brokers_threadsafe)

    def stop(self) -> None:
        """Shutting down: every group's waiting requests are answered NOT_COORDINATOR (members look again)."""
        self._expiry.stop()
        self.consumer_persistence.unload(lambda gid: False)
        for group in list(self._groups.groups.values()):
            self._groups.unload(group, ErrorCode.NOT_COORDINATOR)
        self._groups.stop()

    # ------------------------------------------------------------------ the group protocol (collaborators')
    def join(self, req: JoinGroupRequest, version: int, client_id: str, client_host: str
             ) -> JoinResult | asyncio.Future:
        return self._rebalancer.join(req, version, client_id, client_host)

    def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
             assignments: dict[str, bytes]) -> tuple[int, bytes] | asyncio.Future:
        return self._rebalancer.sync(group_id, generation, member_id, instance_id, assignments)

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        return self._liveness.heartbeat(group_id, generation, member_id, instance_id)

    def leave(self, group_id: str, members: list[tuple[str, str | None]]
              ) -> tuple[int, list[tuple[str, str | None, int]]]:
        return self._liveness.leave(group_id, members)

    def commit(self, req: OffsetCommitRequest, protocol_type: str | None = None
               ) -> CommitResults | Awaitable[CommitResults]:
        return self._offsets.commit(req, protocol_type)

    def fetch_zookeeper_group(self, group_id: str, topics: list[tuple[str, list[int]]]
                              ) -> Awaitable[tuple[int, list[tuple[str, list[FetchedOffset]]]]]:
        """OffsetFetch v0: the paper's ZooKeeper group's offsets (GroupOffsetStore.fetch_zookeeper_group)."""
        return self._offsets.fetch_zookeeper_group(group_id, topics)

    def fetch(self, group_id: str, topics: list[tuple[str, list[int]]] | None
              ) -> OffsetFetchResult | Awaitable[OffsetFetchResult]:
        return self._offsets.fetch(group_id, topics)

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """One pass of offset expiry now (it also runs every offsets.retention.check.interval.ms)."""
        return await self._expiry.sweep(now_ms)

    def _after_departure(self, group: GroupMetadata, why: str | None) -> None:
        """MemberLiveness saw members go: the rebalancer decides (constructed after it, hence this hop)."""
        self._rebalancer.after_departure(group, why)

    # ------------------------------------------------------------------ placement
    def coordinator(self, group_id: str) -> BrokerInfo | None:
        """The live broker coordinating ``group_id`` as this broker sees the cluster."""
        live = self.metadata.brokers
        node = coordinator_for(group_id, live)
        return None if node is None else live.get(node)

    def validate_group(self, group_id: str) -> int:
        """NONE when this broker coordinates the group now, else the error a group request gets."""
        return self._groups.validate_group(group_id)

    def _on_brokers_threadsafe(self, brokers: dict[int, BrokerInfo]) -> None:
        loop = self._groups.loop
        if loop is not None:
            loop.call_soon_threadsafe(self._on_brokers, set(brokers))

    def _on_brokers(self, live: set[int]) -> None:
        """The live brokers changed: groups that now hash to another broker are dropped here."""
        self.consumer_persistence.unload(lambda gid: self._groups.coordinated_here(gid, live))
        for group in list(self._groups.groups.values()):
            if not self._groups.coordinated_here(group.group_id, live):
                log.info("group %s: now coordinated by broker %s; dropping its members here", group.group_id,
                         coordinator_for(group.group_id, live))
                self._groups.unload(group, ErrorCode.NOT_COORDINATOR)

    # ------------------------------------------------------------------ ListGroups / DescribeGroups / DeleteGroups
    async def list_groups(self) -> tuple[int, list[tuple[str, str, str]]]:
        """(error, [(group, protocol type, state)]) of the groups this broker coordinates: those it holds
        (with their state: Stable, PreparingRebalance, ...) and those with committed offsets in ZooKeeper only
        (Empty, as Kafka lists a group it loaded from its offsets)."""
        if not self._groups.serving or self.broker_id not in self.metadata.brokers:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        out = {g.group_id: (g.protocol_type or "", g.state) for g in self._groups.groups.values() if not g.is_(DEAD)}
        try:
            stored = await self._groups.run_in_executor(self.executor, self._stored_groups)
        except Exception as e:
            log.warning("listing groups in ZooKeeper failed: %s", e or type(e).__name__)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [(g, *v) for g, v in sorted(out.items())]
        for gid, ptype in stored.items():
            if gid not in out and self._groups.coordinated_here(gid):
                out[gid] = (ptype, EMPTY)
        return ErrorCode.NONE, [(g, *v) for g, v in sorted(out.items())]

    def _stored_groups(self) -> dict[str, str]:
        client = self.zk_client()
        mine = [g for g in group_offsets.list_groups(client) if self._groups.coordinated_here(g)]
        return {g: group_offsets.group_protocol_type(client, g) or "" for g in mine}

    async def describe_groups(self, group_ids: list[str]) -> list[DescribedGroup]:
        out = []
        for gid in group_ids:
            code = self.validate_group(gid)
            if code:
                out.append(DescribedGroup(code, gid, state=DEAD))
                continue
            group = self._groups.get(gid)
            if group is not None and group.members:
                out.append(self._summary(group))
                continue
            kip848 = self.consumer_groups.classic_summary(gid)
            if kip848 is not None:
                out.append(kip848)
                continue
            ok, ptype = await self._in_zookeeper("reading it from", gid, group_offsets.group_protocol_type)
            if not ok:
                out.append(DescribedGroup(ErrorCode.COORDINATOR_NOT_AVAILABLE, gid, state=DEAD))
                continue
            if ptype is None and group is None:
                out.append(DescribedGroup(ErrorCode.NONE, gid, state=DEAD))
            else:
                out.append(DescribedGroup(ErrorCode.NONE, gid, state=EMPTY,
                                          protocol_type=(group.protocol_type if group else None) or ptype or ""))
        return out

    async def _in_zookeeper(self, doing: str, gid: str, call: Callable[[KazooClient, str], T]) -> tuple[bool, T | None]:
        """``call(zk, gid)`` off the event loop: (True, its result), or (False, None) when ZooKeeper failed
        (logged; the group's answer is then COORDINATOR_NOT_AVAILABLE)."""
        try:
            return True, await self._groups.run_in_executor(self.executor, call, self.zk_client(), gid)
        except Exception as e:
            log.warning("group %s: %s ZooKeeper failed: %s", gid, doing, e or type(e).__name__)
            return False, None

    @staticmethod
    def _summary(group: GroupMetadata) -> DescribedGroup:
        """Kafka's summary: member metadata and assignments only once the group is Stable."""
        stable = group.is_("Stable")
        protocol = (group.protocol_name or "") if stable else ""
        members = [DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                   m.metadata_for(protocol) if stable else b"", m.assignment if stable else b"")
                   for m in group.members.values()]
        return DescribedGroup(ErrorCode.NONE, group.group_id, group.state, group.protocol_type or "", protocol,
                              members)

    async def delete_offsets(self, gid: str, topics: list[tuple[str, list[int]]]
                             ) -> tuple[int, list[tuple[str, list[tuple[int, int]]]]]:
        """OffsetDelete (KIP-496): (the group's error, per partition its error). Kafka's rule: a group with members
        keeps the offsets of the topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC), a group of another
        protocol than "consumer" with members keeps all (NON_EMPTY_GROUP)."""
        code = self.validate_group(gid)
        if code:
            return code, []
        group = self._groups.get(gid)
        subscribed: set[str] = set(self.consumer_groups.subscribed_topics(gid))
        if group is not None and group.members:
            if group.protocol_type != "consumer":
                return ErrorCode.NON_EMPTY_GROUP, []
            subscribed = group.subscribed_topics()
        wanted = [(t, p) for t, ps in topics for p in ps if t not in subscribed]
        ok, found = await self._in_zookeeper("deleting offsets in", gid,
                                             lambda zk, g: group_offsets.delete_offsets(zk, g, wanted))
        if not ok:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        if not found and group is None and not self.consumer_groups.has_members(gid):
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if wanted:
            log.info("group %s: committed offsets of %d partition(s) deleted", gid, len(wanted))
        return ErrorCode.NONE, [(t, [(p, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if t in subscribed else ErrorCode.NONE)
                                     for p in ps]) for t, ps in topics]

    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, int]]:
        out = []
        for gid in group_ids:
            code = self.validate_group(gid)
            if code:
                out.append((gid, code))
                continue
            group = self._groups.get(gid)
            if group is not None and (group.members or group.pending_members) or self.consumer_groups.has_members(gid):
                out.append((gid, ErrorCode.NON_EMPTY_GROUP))
                continue
            ok, deleted = await self._in_zookeeper("deleting it from", gid, group_offsets.delete_group)
            if not ok:
                out.append((gid, ErrorCode.COORDINATOR_NOT_AVAILABLE))
                continue
            if group is not None:
                self._groups.unload(group, ErrorCode.UNKNOWN_MEMBER_ID)
            if deleted or group is not None:
                log.info("group %s deleted", gid)
                out.append((gid, ErrorCode.NONE))
            else:
                out.append((gid, ErrorCode.GROUP_ID_NOT_FOUND))
        return out

