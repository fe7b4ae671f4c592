"""GroupCoordinator: the broker side of Kafka's classic consumer group protocol (docs/groups.md).

Which broker coordinates a group is a pure function of the group id and the live brokers
(``coordinator_for``: sorted live ids, crc32(group) mod their count), so every broker answers FindCoordinator
alike without talking to the others, and when the coordinator dies (its /brokers/ids node goes) its groups
move to the survivors. Membership (members, generation, protocol, leader, assignments) lives in memory here,
as in Kafka; a coordinator that loses a group (dies, or a broker joins and the group hashes elsewhere) drops
it and its members rejoin at the new one under a new generation. Committed offsets live in ZooKeeper
(ferry.zk.group_offsets), so they survive any broker.

The protocol itself is in the parts: group_coordinator_rebalance.py (JoinGroup, SyncGroup),
group_coordinator_liveness.py (Heartbeat, LeaveGroup, session timeouts), group_coordinator_offsets.py
(OffsetCommit, OffsetFetch). Everything runs on the broker's event loop; ZooKeeper calls in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ferry.broker.server.group_coordinator_liveness import GroupLiveness
from ferry.broker.server.group_coordinator_offsets import GroupOffsets
from ferry.broker.server.group_coordinator_rebalance import GroupRebalance
from ferry.broker.server.group_coordinator_state import DEAD, EMPTY, Group, JoinResult
from ferry.wire.protocol.describe_groups import DescribedGroup, DescribedMember
from ferry.wire.protocol.errors import ErrorCode
from ferry.zk import group_offsets
from ferry.zk.znodes import BrokerInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupSettings:
    """The coordinator's settings (Kafka's broker names: group.min.session.timeout.ms, ...)."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_metadata_bytes: int = 4_096  # offset.metadata.max.bytes


def coordinator_for(group_id: str, broker_ids: Iterable[int]) -> int | None:
    """The broker that coordinates ``group_id`` among ``broker_ids`` (None: no broker)."""
    ids = sorted(broker_ids)
    if not ids:
        return None
    return ids[zlib.crc32(group_id.encode("utf-8")) % len(ids)]


class GroupCoordinator(GroupRebalance, GroupLiveness, GroupOffsets):
    def __init__(self, broker_id: int, metadata: Any, zk_client: Callable[[], Any], executor: Any,
                 settings: GroupSettings | None = None) -> None:
        self.broker_id = broker_id
        self.metadata = metadata  # MetadataCache: live brokers, topics
        self.zk_client = zk_client
        self.executor = executor
        self.settings = settings or GroupSettings()
        self.groups: dict[str, Group] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.metadata.add_brokers_listener(self._on_brokers_threadsafe)

    def stop(self) -> None:
        """Shutting down: every group's waiting requests are answered NOT_COORDINATOR (members look again)."""
        for group in list(self.groups.values()):
            self._unload(group, ErrorCode.NOT_COORDINATOR)
        self.loop = None

    # ------------------------------------------------------------------ placement
    def coordinator(self, group_id: str) -> BrokerInfo | None:
        """The live broker coordinating ``group_id`` as this broker sees the cluster."""
        live = self.metadata.brokers
        node = coordinator_for(group_id, live)
        return None if node is None else live.get(node)

    def validate_group(self, group_id: str) -> int:
        """NONE when this broker coordinates the group now, else the error a group request gets."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if self.loop is None or self.broker_id not in self.metadata.brokers:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE  # starting, stopping, or not registered
        if coordinator_for(group_id, self.metadata.brokers) != self.broker_id:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def _on_brokers_threadsafe(self, brokers: dict[int, BrokerInfo]) -> None:
        loop = self.loop
        if loop is not None:
            loop.call_soon_threadsafe(self._on_brokers, set(brokers))

    def _on_brokers(self, live: set[int]) -> None:
        """The live brokers changed: groups that now hash to another broker are dropped here."""
        for group in list(self.groups.values()):
            if coordinator_for(group.group_id, live) != self.broker_id:
                log.info("group %s: now coordinated by broker %s; dropping its members here", group.group_id,
                         coordinator_for(group.group_id, live))
                self._unload(group, ErrorCode.NOT_COORDINATOR)

    def _unload(self, group: Group, code: int) -> None:
        group.cancel_timers()
        for m in group.members.values():
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(JoinResult(code, member_id=m.member_id))
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((code, b""))
        group.state = DEAD
        self.groups.pop(group.group_id, None)

    def _drop_if_empty(self, group: Group) -> None:
        """An Empty group without members is only its offsets (in ZooKeeper): forget it here."""
        if group.is_(EMPTY) and not group.members and not group.pending_members:
            group.cancel_timers()
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]

    # ------------------------------------------------------------------ ListGroups / DescribeGroups / DeleteGroups
    async def list_groups(self) -> tuple[int, list[tuple[str, str]]]:
        """(error, [(group, protocol type)]) of the groups this broker coordinates: those with members here
        and those with committed offsets in ZooKeeper."""
        if self.loop is None or self.broker_id not in self.metadata.brokers:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        out = {g.group_id: g.protocol_type or "" for g in self.groups.values() if not g.is_(DEAD)}
        try:
            stored = await self.loop.run_in_executor(self.executor, self._stored_groups)
        except Exception as e:
            log.warning("listing groups in ZooKeeper failed: %s", e or type(e).__name__)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, sorted(out.items())
        live = self.metadata.brokers
        for gid, ptype in stored.items():
            if gid not in out and coordinator_for(gid, live) == self.broker_id:
                out[gid] = ptype
        return ErrorCode.NONE, sorted(out.items())

    def _stored_groups(self) -> dict[str, str]:
        client = self.zk_client()
        live = self.metadata.brokers
        mine = [g for g in group_offsets.list_groups(client) if coordinator_for(g, live) == self.broker_id]
        return {g: group_offsets.group_protocol_type(client, g) or "" for g in mine}

    async def describe_groups(self, group_ids: list[str]) -> list[DescribedGroup]:
        out = []
        for gid in group_ids:
            code = self.validate_group(gid)
            if code:
                out.append(DescribedGroup(code, gid, state=DEAD))
                continue
            group = self.groups.get(gid)
            if group is not None and group.members:
                out.append(self._summary(group))
                continue
            assert self.loop is not None
            try:
                ptype = await self.loop.run_in_executor(self.executor, group_offsets.group_protocol_type,
                                                        self.zk_client(), gid)
            except Exception as e:
                log.warning("group %s: reading it from ZooKeeper failed: %s", gid, e or type(e).__name__)
                out.append(DescribedGroup(ErrorCode.COORDINATOR_NOT_AVAILABLE, gid, state=DEAD))
                continue
            if ptype is None and group is None:
                out.append(DescribedGroup(ErrorCode.NONE, gid, state=DEAD))
            else:
                out.append(DescribedGroup(ErrorCode.NONE, gid, state=EMPTY,
                                          protocol_type=(group.protocol_type if group else None) or ptype or ""))
        return out

    @staticmethod
    def _summary(group: Group) -> DescribedGroup:
        """Kafka's summary: member metadata and assignments only once the group is Stable."""
        stable = group.is_("Stable")
        protocol = (group.protocol_name or "") if stable else ""
        members = [DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                   m.metadata_for(protocol) if stable else b"", m.assignment if stable else b"")
                   for m in group.members.values()]
        return DescribedGroup(ErrorCode.NONE, group.group_id, group.state, group.protocol_type or "", protocol,
                              members)

    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, int]]:
        out = []
        for gid in group_ids:
            code = self.validate_group(gid)
            if code:
                out.append((gid, code))
                continue
            group = self.groups.get(gid)
            if group is not None and (group.members or group.pending_members):
                out.append((gid, ErrorCode.NON_EMPTY_GROUP))
                continue
            assert self.loop is not None
            try:
                deleted = await self.loop.run_in_executor(self.executor, group_offsets.delete_group,
                                                          self.zk_client(), gid)
            except Exception as e:
                log.warning("group %s: deleting it from ZooKeeper failed: %s", gid, e or type(e).__name__)
                out.append((gid, ErrorCode.COORDINATOR_NOT_AVAILABLE))
                continue
            if group is not None:
                self._unload(group, ErrorCode.UNKNOWN_MEMBER_ID)
            if deleted or group is not None:
                log.info("group %s deleted", gid)
                out.append((gid, ErrorCode.NONE))
            else:
                out.append((gid, ErrorCode.GROUP_ID_NOT_FOUND))
        return out
