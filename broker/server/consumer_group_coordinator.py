"""ConsumerGroupCoordinator: KIP-848's consumer group protocol (ConsumerGroupHeartbeat, ConsumerGroupDescribe)
beside the classic one (docs/groups.md).

The group lives in memory on its coordinator (the same broker the classic protocol picks, so FindCoordinator
is unchanged) and is persisted in ZooKeeper beside its committed offsets (consumer_group_store.py: what Kafka
writes to ``__consumer_offsets``), so a coordinator restart or move keeps the epochs and assignments: a group is
loaded at its first request here, and a heartbeat that changed it is answered once ZooKeeper has the change.
Committed offsets go through the classic GroupCoordinator's store in ZooKeeper. The rules are
KIP-848's: a membership or subscription change bumps the group epoch and the server-side assignor computes a
new target assignment; each member is reconciled towards its target one heartbeat at a time: partitions it
must give up are taken away first (it keeps its epoch), and only once it no longer owns them does it get the
new epoch and the partitions that are free (a partition is given only after its previous owner revoked it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import re2

from ferry.broker.server.consumer_group_assignors import ASSIGNORS, NO_RACKS, Racks, TopicPartition
from ferry.broker.server.consumer_group_state import (
    LEAVE_STATIC_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    compile_regex,
)
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.wire.protocol import consumer_group_describe as cgd
from ferry.wire.protocol import consumer_protocol
from ferry.wire.protocol.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest, TopicPartitions
from ferry.wire.protocol.describe_groups import DescribedGroup, DescribedMember
from ferry.wire.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

HeartbeatAnswer = tuple[int, str | None, str | None, int, TopicPartitions | None]  # code, message, id, epoch, assignment


@dataclass(frozen=True)
class ConsumerGroupSettings:
    """From the broker's group.consumer.session.timeout.ms and group.consumer.heartbeat.interval.ms; the assignors
    (the first is the default, as Kafka's group.consumer.assignors) and the size limit keep Kafka's defaults."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    assignors: tuple[str, ...] = ("uniform", "range")
    max_size: int = 0x7FFFFFFF


class ConsumerGroupCoordinator:
    """The consumer-protocol groups coordinated here: heartbeats, reconciliation, session expiry, describe."""

    def __init__(self, metadata: MetadataCache, settings: ConsumerGroupSettings | None = None) -> None:
        self._metadata = metadata
        self.settings = settings or ConsumerGroupSettings()
        self.groups: dict[str, ConsumerGroup] = {}
        # told of a change no request answers for (a session expiry): the persistence saves the group then
        self.on_change: Callable[[ConsumerGroup], None] | None = None

    def adopt(self, group: ConsumerGroup) -> None:
        """A group loaded from its stored state: coordinated here from now, its members' sessions start now."""
        self.groups[group.group_id] = group
        for member in group.members.values():
            self._keep_alive(group, member)

    def persisted(self, group_id: str, member_id: str | None) -> tuple | None:
        """What a heartbeat of ``member_id`` may change that is persisted (compared before and after)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        member = group.members.get(member_id) if member_id else None
        return group.epoch, group.target_epoch, len(group.members), member.persisted() if member else None

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def subscribed_topics(self, group_id: str) -> frozenset[str]:
        """The topics the group's members subscribe to (OffsetDelete keeps their offsets)."""
        group = self.groups.get(group_id)
        return frozenset().union(*(self._topics_of(m) for m in group.members.values())) if group else frozenset()

    def _topics_of(self, member: ConsumerMember) -> frozenset[str]:
        """The member's subscribed topics: its names, and the topics its regex matches (whole names) now."""
        if member.regex is None:
            return member.subscription
        return member.subscription | {t for t in self._metadata.topics if member.regex.fullmatch(t)}

    def unload(self, keep: Callable[[str], bool]) -> None:
        """Drops the groups ``keep`` rejects (now coordinated elsewhere, or the broker stops): their members
        get UNKNOWN_MEMBER_ID here and rejoin at the new coordinator."""
        for gid in [g for g in self.groups if not keep(g)]:
            group = self.groups.pop(gid)
            for m in group.members.values():
                m.cancel_timers()

    def commit_error(self, group_id: str, member_id: str, member_epoch: int) -> int:
        """OffsetCommit from a KIP-848 member: its id and current epoch (as the generation), else Kafka's errors."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH if member_epoch < member.epoch else ErrorCode.FENCED_MEMBER_EPOCH
        return ErrorCode.NONE

    # ------------------------------------------------------------------ ConsumerGroupHeartbeat
    def heartbeat(self, req: ConsumerGroupHeartbeatRequest, client_id: str, client_host: str) -> HeartbeatAnswer:
        """(error, message, member id, member epoch, assignment or None when unchanged)."""
        bad = self._invalid(req)
        if bad is not None:
            return bad[0], bad[1], req.member_id or None, -1, None
        group = self.groups.get(req.group_id)
        if req.member_epoch < 0:
            if group is not None:
                self._leave(group, req)
            return ErrorCode.NONE, None, req.member_id, req.member_epoch, None
        member = group.members.get(req.member_id) if group is not None and req.member_id else None
        if req.member_epoch == 0:
            assignor = req.server_assignor or self.settings.assignors[0]
            if assignor not in self.settings.assignors:
                return (ErrorCode.UNSUPPORTED_ASSIGNOR, f"assignor {assignor!r} is not one of "
                        f"{', '.join(self.settings.assignors)}", None, -1, None)
            static = group.static_member(req.instance_id) if group is not None else None
            if static is not None and static is not member and not static.left_static:
                return (ErrorCode.UNRELEASED_INSTANCE_ID, f"instance id {req.instance_id} is still used by member "
                        f"{static.member_id}", req.member_id or None, -1, None)
            if group is not None and member is not None:  # rejoining (fenced, or restarted with its id): anew
                self._remove(group, member.member_id, "rejoined")
            group = self.groups.setdefault(req.group_id, ConsumerGroup(req.group_id))
            if len(group.members) >= self.settings.max_size:
                return ErrorCode.GROUP_MAX_SIZE_REACHED, "the group is full", None, -1, None
            member = ConsumerMember(req.member_id or str(uuid.uuid4()), client_id, client_host, req.instance_id,
                                    req.rack_id, subscription=frozenset(req.subscribed_topic_names or ()),
                                    regex=compile_regex(req.subscribed_topic_regex) if req.subscribed_topic_regex else None,
                                    assignor=assignor)
            if static is not None and static is not member and static.left_static:
                self._take_over(group, static, member)
            else:
                group.members[member.member_id] = member
                group.epoch += 1
                log.info("group %s: member %s joined (group epoch %d)", group.group_id, member.member_id, group.epoch)
        elif group is None or member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, "the member is not in the group", req.member_id, -1, None
        elif req.member_epoch != member.epoch and not (
                req.member_epoch == member.previous_epoch and req.owned is not None
                and self._owned(req.owned) <= member.assigned):
            return ErrorCode.FENCED_MEMBER_EPOCH, (f"epoch {req.member_epoch} is not the member's "
                                                   f"{member.epoch}"), member.member_id, -1, None
        self._update_subscription(group, member, req)
        self._keep_alive(group, member)
        if req.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.owned is not None:
            member.revoking &= self._owned(req.owned)
        if group.target_epoch < group.epoch or self._metadata_changed(group):
            self._compute_target(group)
        self._reconcile(group, member)
        sent = frozenset(member.assigned)
        assignment = None
        if sent != member.last_sent or req.member_epoch == 0:
            member.last_sent = sent
            assignment = self._by_id(sent)
        return ErrorCode.NONE, None, member.member_id, member.epoch, assignment

    @staticmethod
    def _invalid(req: ConsumerGroupHeartbeatRequest) -> tuple[int, str] | None:
        """(error, message) of a heartbeat that cannot be served, else None."""
        if not req.group_id:
            return ErrorCode.INVALID_REQUEST, "the group id is empty"
        if req.member_epoch > 0 and not req.member_id:
            return ErrorCode.INVALID_REQUEST, "a member id is required with a member epoch"
        if req.member_epoch == 0 and req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            return ErrorCode.INVALID_REQUEST, "a joining member must give its subscription"
        if req.member_epoch < -2:
            return ErrorCode.INVALID_REQUEST, f"member epoch {req.member_epoch} is invalid"
        if req.subscribed_topic_regex:
            try:
                compile_regex(req.subscribed_topic_regex)
            except re2.error as e:
                reason = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
                return ErrorCode.INVALID_REGULAR_EXPRESSION, f"invalid regular expression: {reason}"
        return None

    def _update_subscription(self, group: ConsumerGroup, member: ConsumerMember, req: ConsumerGroupHeartbeatRequest) -> None:
        if req.subscribed_topic_names is not None and frozenset(req.subscribed_topic_names) != member.subscription:
            member.subscription = frozenset(req.subscribed_topic_names)
            group.epoch += 1
        regex = req.subscribed_topic_regex
        if regex is not None and regex != (member.regex.pattern if member.regex else ""):
            member.regex = compile_regex(regex) if regex else None  # "": no regex any more
            group.epoch += 1
        if req.server_assignor and req.server_assignor in self.settings.assignors:
            member.assignor = req.server_assignor

    def _leave(self, group: ConsumerGroup, req: ConsumerGroupHeartbeatRequest) -> None:
        """Epoch -1 leaves; a static member's -2 keeps its place and partitions for its instance id until its
        session times out (KIP-848: a restarted static member takes its assignment back, nobody rebalances)."""
        member = group.members.get(req.member_id)
        if member is not None and req.member_epoch == LEAVE_STATIC_EPOCH and member.instance_id is not None:
            member.left_static = True
            self._keep_alive(group, member)
            log.info("group %s: static member %s (instance %s) left; its partitions wait for it", group.group_id,
                     member.member_id, member.instance_id)
            return
        self._remove(group, req.member_id, "left the group")

    def _take_over(self, group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember) -> None:
        """A static member back with a new member id: it gets the old one's epoch, partitions and target."""
        old.cancel_timers()
        del group.members[old.member_id]
        new.epoch, new.previous_epoch = old.epoch, old.previous_epoch
        new.assigned, new.revoking = set(old.assigned), set(old.revoking)
        if old.member_id in group.target:
            group.target[new.member_id] = group.target.pop(old.member_id)
        group.members[new.member_id] = new
        pattern = (lambda m: m.regex.pattern if m.regex is not None else None)  # noqa: E731
        if new.subscription != old.subscription or pattern(new) != pattern(old):
            group.epoch += 1  # its subscription changed: a new target
        log.info("group %s: static member %s (instance %s) is back as %s with epoch %d", group.group_id,
                 old.member_id, new.instance_id, new.member_id, new.epoch)

    def _keep_alive(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """(Re)arms the member's session: silent for group.consumer.session.timeout.ms, it is removed."""
        if member.expiry is not None:
            member.expiry.cancel()
        loop = asyncio.get_running_loop()
        member.expiry = loop.call_later(self.settings.session_timeout_ms / 1000, self._expire, group, member)

    def _expire(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if group.members.get(member.member_id) is member:
            self._remove(group, member.member_id, "session timed out")
            if self.on_change is not None:
                self.on_change(group)

    def _release_overdue(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if group.members.get(member.member_id) is member and member.revoking:
            self._remove(group, member.member_id, "did not release its partitions within its rebalance timeout")
            if self.on_change is not None:
                self.on_change(group)

    def _remove(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        member.cancel_timers()
        group.epoch += 1
        log.info("group %s: member %s %s (group epoch %d)", group.group_id, member_id, why, group.epoch)
        if not group.members and self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]  # an empty group is forgotten (its offsets stay in ZooKeeper)

    # ------------------------------------------------------------------ assignment and reconciliation
    def _subscribed_counts(self, group: ConsumerGroup) -> dict[str, int]:
        topics = self._metadata.topics
        wanted = set().union(*(self._topics_of(m) for m in group.members.values())) if group.members else set()
        return {t: topics[t].partition_count for t in wanted if t in topics}

    def _metadata_changed(self, group: ConsumerGroup) -> bool:
        """A subscribed topic appeared, went or grew: KIP-848 bumps the group epoch."""
        if self._subscribed_counts(group) != group.partition_counts:
            group.epoch += 1
            return True
        return False

    def _compute_target(self, group: ConsumerGroup) -> None:
        votes = [m.assignor for m in group.members.values() if m.assignor]
        group.assignor = max(sorted(set(votes)), key=votes.count) if votes else self.settings.assignors[0]
        group.partition_counts = self._subscribed_counts(group)
        subs = {m.member_id: self._topics_of(m) for m in group.members.values()}
        group.target = ASSIGNORS[group.assignor](subs, group.partition_counts, group.target, self._racks(group))
        group.target_epoch = group.epoch
        log.info("group %s: target assignment of epoch %d by %s", group.group_id, group.epoch, group.assignor)

    def _racks(self, group: ConsumerGroup) -> Racks:
        """The members' racks and, when any member has one, the racks (datacenters) of each partition's replicas."""
        members = {m.member_id: m.rack_id for m in group.members.values() if m.rack_id}
        if not members:
            return NO_RACKS
        brokers, topics = self._metadata.brokers, self._metadata.topics
        partitions = {}
        for t in group.partition_counts:
            info = topics.get(t)
            for p, leader in (info.partitions.items() if info is not None else ()):
                replicas = info.replicas.get(p) or (leader,)
                partitions[(t, p)] = frozenset(brokers[b].datacenter for b in replicas
                                               if b in brokers and brokers[b].datacenter)
        return Racks(members, partitions)

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """One step towards the member's target: revoke first; once released, the new epoch and the free
        partitions (those no other member owns or is still releasing). A member that does not release within
        its rebalance timeout is removed from the group (as Kafka fences it)."""
        target = group.target.get(member.member_id, set())
        revoke = member.assigned - target
        if revoke:
            member.assigned -= revoke
            member.revoking |= revoke
        if member.revoking:
            if member.release_deadline is None:
                member.release_deadline = asyncio.get_running_loop().call_later(
                    member.rebalance_timeout_ms / 1000, self._release_overdue, group, member)
            return
        if member.release_deadline is not None:
            member.release_deadline.cancel()
            member.release_deadline = None
        taken = set()
        for other in group.members.values():
            if other is not member:
                taken |= other.assigned | other.revoking
        member.assigned |= target - taken
        if member.epoch != group.target_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.target_epoch

    def _owned(self, owned: TopicPartitions) -> set[TopicPartition]:
        names = {info.topic_uuid: name for name, info in self._metadata.topics.items()}
        return {(names[tid], p) for tid, parts in owned if tid in names for p in parts}

    def _by_id(self, tps: frozenset[TopicPartition]) -> TopicPartitions:
        topics = self._metadata.topics
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(tps):
            by_topic.setdefault(t, []).append(p)
        return [(topics[t].topic_uuid, ps) for t, ps in by_topic.items() if t in topics]

    # ------------------------------------------------------------------ ConsumerGroupDescribe / ListGroups
    def describe(self, group_id: str) -> cgd.ConsumerGroupDescription | None:
        """The group as KIP-848 describes it; None when no consumer-protocol group of that id is here."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        members = [cgd.ConsumerGroupMember(m.member_id, m.instance_id, m.rack_id, m.epoch, m.client_id, m.client_host,
                                       sorted(m.subscription), m.regex.pattern if m.regex else None,
                                       self._named(m.assigned),
                                       self._named(group.target.get(m.member_id, set())))
                   for m in group.members.values()]
        return cgd.ConsumerGroupDescription(ErrorCode.NONE, group_id, None, group.state, group.epoch, group.target_epoch,
                                  group.assignor, members)

    def classic_summary(self, group_id: str) -> DescribedGroup | None:
        """The group as DescribeGroups shows it to classic tools (kafka-python's admin, `ferry groups describe`):
        protocol type "consumer", the assignor as protocol, each member's subscription and current assignment in
        the consumer protocol's encoding. None when no KIP-848 group of that id has members here."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return None
        members = []
        for m in group.members.values():
            owned: dict[str, list[int]] = {}
            for t, p in m.assigned:
                owned.setdefault(t, []).append(p)
            members.append(DescribedMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                                           consumer_protocol.encode_subscription(sorted(self._topics_of(m))),
                                           consumer_protocol.encode_assignment(owned)))
        return DescribedGroup(ErrorCode.NONE, group_id, group.state, "consumer", group.assignor, members)

    def _named(self, tps: set[TopicPartition]) -> cgd.NamedPartitions:
        topics = self._metadata.topics
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(tps):
            by_topic.setdefault(t, []).append(p)
        return [(topics[t].topic_uuid, t, ps) for t, ps in by_topic.items() if t in topics]

    def listed(self) -> list[tuple[str, str, str]]:
        """[(group, protocol type, state)] as ListGroups shows them (protocol type "consumer")."""
        return [(g.group_id, "consumer", g.state) for g in self.groups.values() if g.members]

