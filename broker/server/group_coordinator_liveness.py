"""Liveness in the classic group protocol: Heartbeat, LeaveGroup, session timeouts and what follows a
member's departure (Kafka's GroupCoordinator). A collaborator of GroupCoordinator, on the broker's event loop.

A member's session timer restarts at every Heartbeat, SyncGroup, OffsetCommit and JoinGroup answer; when it
fires the member is removed and the group rebalances. A member waiting in JoinGroup or SyncGroup is not
expired (the rebalance timeout covers it). Heartbeat answers REBALANCE_IN_PROGRESS while the group prepares a
rebalance: that is how members learn to rejoin.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ferry.broker.server.group_coordinator_state import (
    PREPARING_REBALANCE,
    GroupMetadata,
    GroupMetadataManager,
    JoinResult,
    Member,
)
from ferry.wire.protocol.errors import ErrorCode

log = logging.getLogger("ferry.broker.server.group_coordinator")

# after members left or expired (why), or pending members went (None): the group rebalances or completes its join
Departure = Callable[[GroupMetadata, "str | None"], None]


class MemberLiveness:
    """Heartbeat / LeaveGroup and the members' session timers; what a departure means for the group's
    rebalance is ``on_departure``'s (the rebalancer's)."""

    def __init__(self, groups: GroupMetadataManager, on_departure: Departure) -> None:
        self._groups = groups
        self._on_departure = on_departure

    # ------------------------------------------------------------------ Heartbeat
    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        code = self._groups.validate_group(group_id)
        if code:
            return code
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        code = group.member_error(member_id, instance_id)
        if code:
            return code
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self.schedule_heartbeat(group, group.members[member_id])
        if group.is_(PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def schedule_heartbeat(self, group: GroupMetadata, member: Member) -> None:
        """(Re)start the member's session timer."""
        member.cancel_heartbeat()
        member.heartbeat_timer = self._groups.call_later(member.session_timeout_ms, self._expire_member, group,
                                                         member)

    def _expire_member(self, group: GroupMetadata, member: Member) -> None:
        if not self._groups.current(group) or group.members.get(member.member_id) is not member \
                or member.awaiting_join or member.awaiting_sync:
            return
        log.info("group %s: member %s missed its session timeout (%d ms); removed", group.group_id,
                 member.member_id, member.session_timeout_ms)
        group.remove(member.member_id)
        self._on_departure(group, f"member {member.member_id} expired")

    # ------------------------------------------------------------------ LeaveGroup
    def leave(self, group_id: str, members: list[tuple[str, str | None]]
              ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """(top-level error, [(member_id, instance_id, error)]); a static member may be named by its instance id
        alone (an admin's removal)."""
        code = self._groups.validate_group(group_id)
        if code:
            return code, []
        group = self._groups.get(group_id)
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
                self._on_departure(group, f"{', '.join(left)} left")
            else:
                self._on_departure(group, None)  # pending members only: the join may complete now
        return ErrorCode.NONE, out
