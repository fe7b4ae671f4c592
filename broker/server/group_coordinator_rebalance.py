"""The classic group protocol's rebalance on the coordinator: JoinGroup, the join phase and SyncGroup (Kafka's
GroupCoordinator, KIP-62/345/394). A collaborator of GroupCoordinator; Heartbeat, LeaveGroup and the session
timeouts are group_coordinator_liveness.py.

Everything runs on the broker's event loop: a request either gets its answer at once or a future the
coordinator completes later (the join phase ends, the leader sends the assignments). Rules, as Kafka's:

- a rebalance starts when a member joins, leaves, changes its protocols, or misses its session timeout;
- the join phase ends when every known member has rejoined, or after the group's rebalance timeout (members
  that did not rejoin are dropped; static ones are kept); a group that was Empty waits
  ``group.initial.rebalance.delay.ms`` first (extended by each new member, at most its rebalance timeout)
  so members started together land in one generation;
- the generation is bumped, a protocol voted, the leader (the old one if still there) gets every member's
  metadata; SyncGroup from the leader makes the group Stable and answers everyone with their assignment;
  a leader that never syncs within the rebalance timeout is dropped and the group rebalances again;
- a member waiting in JoinGroup or SyncGroup is never expired by its session timeout.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from ferry.broker.server.group_coordinator_liveness import MemberLiveness
from ferry.broker.server.group_coordinator_state import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupMetadata,
    GroupMetadataManager,
    GroupSettings,
    JoinResult,
    Member,
)
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.join_group import JoinGroupRequest

log = logging.getLogger("ferry.broker.server.group_coordinator")


class GroupRebalancer:
    """JoinGroup, the join phase and SyncGroup, and what members' departures mean for a rebalance (a
    collaborator of GroupCoordinator); the members' session timers are ``liveness``'s."""

    def __init__(self, groups: GroupMetadataManager, settings: GroupSettings, liveness: MemberLiveness) -> None:
        self._groups = groups
        self._settings = settings
        self._liveness = liveness

    # ------------------------------------------------------------------ JoinGroup
    def join(self, req: JoinGroupRequest, version: int, client_id: str, client_host: str
             ) -> JoinResult | asyncio.Future:
        """A JoinGroup: its answer now, or a future completed when the join phase ends."""
        code = self._groups.validate_group(req.group_id)
        if code:
            return JoinResult(code, member_id=req.member_id)
        s = self._settings
        if not s.min_session_timeout_ms <= req.session_timeout_ms <= s.max_session_timeout_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=req.member_id)
        group = self._groups.get(req.group_id)
        if group is not None and not group.supports(req.protocol_type, req.protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
        if group is None and (not req.protocol_type or not req.protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
        if group is None:
            group = self._groups.create(req.group_id)
        if not req.member_id:
            return self._join_unknown_member(group, req, version, client_id, client_host)
        return self._join_known_member(group, req, client_id, client_host)

    def _join_unknown_member(self, group: GroupMetadata, req: JoinGroupRequest, version: int, client_id: str,
                             client_host: str) -> JoinResult | asyncio.Future:
        member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            old_id = group.static_members.get(req.group_instance_id)
            if old_id is not None and old_id in group.members:
                return self._replace_static_member(group, old_id, member_id, req)
        elif version >= 4:
            # KIP-394: hand out the id first, so a member that retries after a timeout is not counted twice
            group.pending_members[member_id] = self._groups.call_later(
                req.session_timeout_ms, self._expire_pending, group, member_id)
            self._groups.drop_if_empty(group)
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
        member = Member(member_id, req.group_instance_id, client_id, client_host, req.session_timeout_ms,
                        req.rebalance_timeout_ms, req.protocol_type, list(req.protocols))
        return self._add_member_and_rebalance(group, member)

    def _join_known_member(self, group: GroupMetadata, req: JoinGroupRequest, client_id: str, client_host: str
                           ) -> JoinResult | asyncio.Future:
        member_id = req.member_id
        if member_id in group.pending_members:
            handle = group.pending_members.pop(member_id)
            if handle is not None:
                handle.cancel()
            member = Member(member_id, req.group_instance_id, client_id, client_host, req.session_timeout_ms,
                            req.rebalance_timeout_ms, req.protocol_type, list(req.protocols))
            return self._add_member_and_rebalance(group, member)
        code = group.member_error(member_id, req.group_instance_id)
        if code:
            self._groups.drop_if_empty(group)
            return JoinResult(code, member_id=member_id)
        member = group.members[member_id]
        if group.is_(PREPARING_REBALANCE):
            self._update_member(member, req)
            return self._await_join(group, member)
        if group.is_(COMPLETING_REBALANCE):
            if member.same_protocols(req.protocols):
                return group.join_result(member)  # its JoinGroup answer was lost: send it again
            self._update_member(member, req)
            self._prepare_rebalance(group, f"member {member_id} changed its protocols")
            return self._await_join(group, member)
        if group.is_(STABLE):
            if member_id == group.leader_id or not member.same_protocols(req.protocols):
                self._update_member(member, req)
                self._prepare_rebalance(group, f"member {member_id} rejoined")
                return self._await_join(group, member)
            return group.join_result(member)  # a follower with nothing new: same generation, go and sync
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)

    def _replace_static_member(self, group: GroupMetadata, old_id: str, new_id: str, req: JoinGroupRequest
                               ) -> JoinResult | asyncio.Future:
        """A static member restarted (same group.instance.id): the new member id takes the old one's place and
        assignment; the old id is fenced. No rebalance unless its protocols changed or it led the group."""
        old = group.members.pop(old_id)
        old.cancel_heartbeat()
        for fut, result in ((old.join_future, JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id)),
                            (old.sync_future, (ErrorCode.FENCED_INSTANCE_ID, b""))):
            if fut is not None and not fut.done():
                fut.set_result(result)
        member = Member(new_id, req.group_instance_id, old.client_id, old.client_host, req.session_timeout_ms,
                        req.rebalance_timeout_ms, req.protocol_type, list(old.protocols), assignment=old.assignment)
        group.members[new_id] = member
        group.static_members[req.group_instance_id or ""] = new_id
        was_leader = group.leader_id == old_id
        if was_leader:
            group.leader_id = new_id
        changed = not old.same_protocols(req.protocols)
        member.protocols = list(req.protocols)
        if group.is_(STABLE) and not changed and not was_leader:
            self._liveness.schedule_heartbeat(group, member)
            return group.join_result(member)
        if group.is_(PREPARING_REBALANCE):
            return self._await_join(group, member)
        self._prepare_rebalance(group, f"static member {req.group_instance_id} restarted")
        return self._await_join(group, member)

    def _add_member_and_rebalance(self, group: GroupMetadata, member: Member) -> asyncio.Future:
        was_empty = group.is_(EMPTY) and not group.members
        group.add(member)
        fut = self._await_join(group, member)
        if was_empty:
            self._prepare_rebalance(group, f"first member {member.member_id} joined", initial=True)
        elif group.is_(PREPARING_REBALANCE):
            self._extend_initial_delay(group)
        else:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        self._try_complete_join(group)  # everyone known has joined (no initial delay): the generation forms now
        return fut

    @staticmethod
    def _update_member(member: Member, req: JoinGroupRequest) -> None:
        member.protocols = list(req.protocols)
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms

    def _await_join(self, group: GroupMetadata, member: Member) -> asyncio.Future:
        if member.join_future is None or member.join_future.done():
            member.join_future = self._groups.create_future()
        member.cancel_heartbeat()  # waiting in JoinGroup: only the rebalance timeout applies
        fut = member.join_future
        self._try_complete_join(group)
        return fut

    # ------------------------------------------------------------------ the join phase
    def _prepare_rebalance(self, group: GroupMetadata, why: str, initial: bool = False) -> None:
        if group.is_(COMPLETING_REBALANCE):
            self._reset_assignments(group, ErrorCode.REBALANCE_IN_PROGRESS)
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None
        if group.is_(PREPARING_REBALANCE):
            return
        group.state = PREPARING_REBALANCE
        if group.join_timer is not None:
            group.join_timer.cancel()
        timeout_ms = group.rebalance_timeout_ms()
        delay_ms = self._settings.initial_rebalance_delay_ms
        if initial and delay_ms > 0:
            group.initial_delay_deadline = self._groups.time() + timeout_ms / 1000.0
            group.join_timer = self._groups.call_later(min(delay_ms, timeout_ms), self._join_deadline, group,
                                                group.generation_id, True)
        else:
            group.initial_delay_deadline = 0.0
            group.join_timer = self._groups.call_later(timeout_ms, self._join_deadline, group, group.generation_id,
                                                       False)
        log.info("group %s: preparing to rebalance (generation %d): %s", group.group_id, group.generation_id, why)

    def _extend_initial_delay(self, group: GroupMetadata) -> None:
        """Another member arrived during the initial delay: wait the delay again, within the rebalance timeout."""
        if not group.initial_delay_deadline or group.join_timer is None or not self._groups.serving:
            return
        remaining_ms = (group.initial_delay_deadline - self._groups.time()) * 1000.0
        delay_ms = min(self._settings.initial_rebalance_delay_ms, max(remaining_ms, 0.0))
        group.join_timer.cancel()
        group.join_timer = self._groups.call_later(delay_ms, self._join_deadline, group, group.generation_id,
                                                   True)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        if group.is_(PREPARING_REBALANCE) and not group.initial_delay_deadline and group.all_joined():
            self._complete_join(group)

    def _join_deadline(self, group: GroupMetadata, generation: int, initial: bool) -> None:
        if not self._groups.current(group) or not group.is_(PREPARING_REBALANCE) \
                or group.generation_id != generation:
            return
        group.join_timer = None
        if initial:
            group.initial_delay_deadline = 0.0
        self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_delay_deadline = 0.0
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            if member.group_instance_id is None:
                group.remove(member.member_id)
                log.info("group %s: member %s did not rejoin in time; removed", group.group_id, member.member_id)
        for member_id, handle in list(group.pending_members.items()):
            if handle is not None:
                handle.cancel()
            del group.pending_members[member_id]
        group.generation_id += 1
        if not group.members:
            group.state, group.protocol_name, group.leader_id = EMPTY, None, None
            log.info("group %s: empty at generation %d", group.group_id, group.generation_id)
            self._groups.drop_if_empty(group)
            return
        if group.leader_id not in group.members or not group.members[group.leader_id].awaiting_join:
            group.leader_id = next((m.member_id for m in group.members.values() if m.awaiting_join),
                                   next(iter(group.members)))
        group.protocol_name = group.select_protocol()
        group.state = COMPLETING_REBALANCE
        log.info("group %s: generation %d with %d member(s), protocol %s, leader %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name, group.leader_id)
        for member in group.members.values():
            member.assignment = b""
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(group.join_result(member))
            self._liveness.schedule_heartbeat(group, member)
        group.sync_timer = self._groups.call_later(max(group.rebalance_timeout_ms(), 1), self._sync_deadline,
                                                   group, group.generation_id)

    # ------------------------------------------------------------------ SyncGroup
    def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
             assignments: dict[str, bytes]) -> tuple[int, bytes] | asyncio.Future:
        code = self._groups.validate_group(group_id)
        if code:
            return code, b""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, b""
        code = group.member_error(member_id, instance_id)
        if code:
            return code, b""
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION, b""
        member = group.members[member_id]
        if group.is_(PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS, b""
        if group.is_(STABLE):
            member.synced_generation = generation
            self._liveness.schedule_heartbeat(group, member)
            return ErrorCode.NONE, member.assignment
        if not group.is_(COMPLETING_REBALANCE):
            return ErrorCode.UNKNOWN_MEMBER_ID, b""
        member.synced_generation = generation
        if member.sync_future is None or member.sync_future.done():
            member.sync_future = self._groups.create_future()
        fut = member.sync_future
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = STABLE
            if group.sync_timer is not None:
                group.sync_timer.cancel()
                group.sync_timer = None
            log.info("group %s: generation %d is stable", group.group_id, group.generation_id)
            for m in group.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result((ErrorCode.NONE, m.assignment))
                self._liveness.schedule_heartbeat(group, m)
        return fut

    def _reset_assignments(self, group: GroupMetadata, code: int) -> None:
        for m in group.members.values():
            m.assignment = b""
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((code, b""))

    def _sync_deadline(self, group: GroupMetadata, generation: int) -> None:
        if not self._groups.current(group) or not group.is_(COMPLETING_REBALANCE) \
                or group.generation_id != generation:
            return
        group.sync_timer = None
        missing = [m.member_id for m in group.members.values() if m.synced_generation != generation]
        for member_id in missing:
            group.remove(member_id)
        log.info("group %s: no assignment from the leader within the rebalance timeout; removed %s",
                 group.group_id, missing)
        self._reset_assignments(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self.after_departure(group, "members did not sync")

    # ------------------------------------------------------------------ departures
    def after_departure(self, group: GroupMetadata, why: str | None) -> None:
        """Members left or expired (``why``), or only pending members went (None): rebalance, or complete a
        join that waited for them; an emptied group goes."""
        if why is not None and (group.is_(STABLE) or group.is_(COMPLETING_REBALANCE)):
            self._prepare_rebalance(group, why)
            self._try_complete_join(group)
        elif why is None or group.is_(PREPARING_REBALANCE):
            self._try_complete_join(group)
        if why is not None and not group.members and not group.is_(PREPARING_REBALANCE):
            group.state = EMPTY
        self._groups.drop_if_empty(group)

    def _expire_pending(self, group: GroupMetadata, member_id: str) -> None:
        if self._groups.current(group) and group.pending_members.pop(member_id, "absent") != "absent":
            self.after_departure(group, None)
