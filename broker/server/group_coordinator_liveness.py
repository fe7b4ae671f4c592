"""Liveness in the classic group protocol: Heartbeat, LeaveGroup, session timeouts and what follows a
member's departure (Kafka's GroupCoordinator). A part of GroupCoordinator, on the broker's event loop.

A member's session timer restarts at every Heartbeat, SyncGroup, OffsetCommit and JoinGroup answer; when it
fires the member is removed and the group rebalances. A member waiting in JoinGroup or SyncGroup is not
expired (the rebalance timeout covers it). Heartbeat answers REBALANCE_IN_PROGRESS while the group prepares a
rebalance: that is how members learn to rejoin.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ferry.broker.server.group_coordinator_state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Group,
    JoinResult,
    Member,
)
from ferry.wire.protocol.errors import ErrorCode

log = logging.getLogger("ferry.broker.server.group_coordinator")


class GroupLiveness:
    """Heartbeat / LeaveGroup, session expiry, rebalancing after a member is gone (a part of GroupCoordinator)."""

    groups: dict[str, Group]
    loop: asyncio.AbstractEventLoop | None

    if TYPE_CHECKING:  # provided by the other parts of GroupCoordinator
        def validate_group(self, group_id: str) -> int: ...  # GroupCoordinator

        def _drop_if_empty(self, group: Group) -> None: ...  # GroupCoordinator

        # GroupRebalance (group_coordinator_rebalance.py)
        def _prepare_rebalance(self, group: Group, why: str, initial: bool = False) -> None: ...

        def _try_complete_join(self, group: Group) -> None: ...

    # ------------------------------------------------------------------ Heartbeat
    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        code = self.validate_group(group_id)
        if code:
            return code
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        code = self._member_error(group, member_id, instance_id)
        if code:
            return code
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self._schedule_heartbeat(group, group.members[member_id])
        if group.is_(PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _member_error(self, group: Group, member_id: str, instance_id: str | None) -> int:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID for a member this group does not know (as it is now)."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is not None and current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members or group.is_(DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        member.cancel_heartbeat()
        member.heartbeat_timer = self._call_later(member.session_timeout_ms, self._expire_member, group, member)

    def _expire_member(self, group: Group, member: Member) -> None:
        if not self._current(group) or group.members.get(member.member_id) is not member or member.awaiting_join \
                or member.awaiting_sync:
            return
        log.info("group %s: member %s missed its session timeout (%d ms); removed", group.group_id,
                 member.member_id, member.session_timeout_ms)
        group.remove(member.member_id)
        self._after_removal(group, f"member {member.member_id} expired")

    def _current(self, group: Group) -> bool:
        """Is this group object still the one coordinated here (a timer may outlive a dropped group)?"""
        return self.groups.get(group.group_id) is group

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if self._current(group) and group.pending_members.pop(member_id, "absent") != "absent":
            self._try_complete_join(group)
            self._drop_if_empty(group)

    # ------------------------------------------------------------------ LeaveGroup
    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[tuple[str, str | None, int]]]:
        """(top-level error, [(member_id, instance_id, error)]); a static member may be named by its instance id
        alone (an admin's removal)."""
        code = self.validate_group(group_id)
        if code:
            return code, []
        group = self.groups.get(group_id)
        out: list[tuple[str, str | None, int]] = []
        left = []
        for member_id, instance_id in members:
            if group is None:
                out.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            if instance_id is not None:
                current = group.static_members.get(instance_id)
                if current is None:
                    out.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                    continue
                if member_id and member_id != current:
                    out.append((member_id, instance_id, ErrorCode.FENCED_INSTANCE_ID))
                    continue
                member_id = current
            if group.pending_members.pop(member_id, "absent") != "absent":
                out.append((member_id, instance_id, ErrorCode.NONE))
                continue
            member = group.remove(member_id)
            if member is None:
                out.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            for fut, result in ((member.join_future, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)),
                                (member.sync_future, (ErrorCode.UNKNOWN_MEMBER_ID, b""))):
                if fut is not None and not fut.done():
                    fut.set_result(result)
            left.append(member_id)
            out.append((member_id, instance_id, ErrorCode.NONE))
        if group is not None:
            if left:
                log.info("group %s: %s left", group_id, ", ".join(left))
                self._after_removal(group, f"{', '.join(left)} left")
            else:
                self._try_complete_join(group)
                self._drop_if_empty(group)
        return ErrorCode.NONE, out

    def _after_removal(self, group: Group, why: str) -> None:
        if group.is_(STABLE) or group.is_(COMPLETING_REBALANCE):
            self._prepare_rebalance(group, why)
            self._try_complete_join(group)
        elif group.is_(PREPARING_REBALANCE):
            self._try_complete_join(group)
        if not group.members and not group.is_(PREPARING_REBALANCE):
            group.state = EMPTY
        self._drop_if_empty(group)

    def _call_later(self, delay_ms: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        assert self.loop is not None
        return self.loop.call_later(max(delay_ms, 0) / 1000.0, callback, *args)
