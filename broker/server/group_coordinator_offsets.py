"""OffsetCommit and OffsetFetch on the coordinator (a collaborator of GroupCoordinator).

Offsets are durable in ZooKeeper (ferry.zk.group_offsets), never cached here: the broker that coordinates the
group after this one reads exactly what was committed, and a commit is answered only once ZooKeeper has it.
A commit is checked against the group as Kafka checks it (generation, member, state) on the event loop, then
written in a worker thread; commits of one group are written in arrival order (a per-group lock).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from kazoo.client import KazooClient

from ferry.broker.server.group_coordinator_liveness import MemberLiveness
from ferry.broker.server.group_coordinator_state import (
    COMPLETING_REBALANCE,
    DEAD,
    GroupMetadataManager,
    GroupSettings,
)
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.offset_commit import OffsetCommitRequest
from ferry.wire.protocol.offset_fetch import FetchedOffset
from ferry.zk.group_offsets import CommittedOffset, commit_offsets, fetch_offsets, now_ms
from ferry.zk.zookeeper_group_offsets import fetch_zookeeper_offsets

log = logging.getLogger("ferry.broker.server.group_coordinator")

CommitResults = list[tuple[str, list[tuple[int, int]]]]


class GroupOffsetStore:
    """OffsetCommit / OffsetFetch against ZooKeeper (a collaborator of GroupCoordinator); owns the commit locks
    of groups that have no members here (offsets-only groups)."""

    def __init__(self, groups: GroupMetadataManager, settings: GroupSettings, zk_client: Callable[[], KazooClient],
                 executor: Executor, liveness: MemberLiveness) -> None:
        self._groups = groups
        self._settings = settings
        self._zk_client = zk_client
        self._executor = executor
        self._liveness = liveness
        self._standalone_locks: dict[str, asyncio.Lock] = {}

    # ------------------------------------------------------------------ OffsetCommit
    def commit(self, req: OffsetCommitRequest, protocol_type: str | None = None
               ) -> CommitResults | Awaitable[CommitResults]:
        """Per partition, the commit's error code: now (nothing to write) or once ZooKeeper has the offsets.
        ``protocol_type``: the group's, when it is not a classic group here (KIP-848's groups: "consumer")."""
        code = self._commit_error(req)
        topics = self._groups.metadata.topics
        results: CommitResults = []
        to_write: dict[tuple[str, int], CommittedOffset] = {}
        stamp = now_ms()
        limit = self._settings.max_metadata_bytes
        for topic, parts in req.topics:
            info = topics.get(topic)
            out = []
            for p in parts:
                if code:
                    out.append((p.partition, code))
                elif info is None or p.partition not in info.partitions:
                    out.append((p.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                elif p.metadata is not None and len(p.metadata.encode()) > limit:
                    out.append((p.partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                else:
                    out.append((p.partition, ErrorCode.NONE))
                    to_write[(topic, p.partition)] = CommittedOffset(p.offset, p.leader_epoch, p.metadata or "",
                                                                     stamp)
            results.append((topic, out))
        if not to_write:
            return results
        if protocol_type is None:
            group = self._groups.get(req.group_id)
            protocol_type = (group.protocol_type if group is not None else None) or ""
        return self._write_offsets(req.group_id, to_write, protocol_type, results)

    def _commit_error(self, req: OffsetCommitRequest) -> int:
        """Kafka's checks: generation -1 without a member id is a commit from outside the group protocol,
        accepted only while the group has no members; otherwise member, generation and state must match."""
        code = self._groups.validate_group(req.group_id)
        if code:
            return code
        group = self._groups.get(req.group_id)
        standalone = req.generation_id < 0 and not req.member_id and req.group_instance_id is None
        if group is None or not group.has_members:
            if standalone:
                return ErrorCode.NONE
            # a member of a generation this coordinator never formed (it took over): make it rejoin here
            return ErrorCode.ILLEGAL_GENERATION if group is None else ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        code = group.member_error(req.member_id, req.group_instance_id)
        if code:
            return code
        if req.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        self._liveness.schedule_heartbeat(group, group.members[req.member_id])
        return ErrorCode.NONE

    async def _write_offsets(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset],
                             protocol_type: str, results: CommitResults) -> CommitResults:
        lock = self._commit_lock(group_id)
        async with lock:
            try:
                await self._groups.run_in_executor(self._executor, commit_offsets, self._zk_client(), group_id,
                                                   offsets, protocol_type)
                return results
            except Exception as e:
                log.warning("group %s: committing %d offset(s) to ZooKeeper failed: %s", group_id, len(offsets),
                            e or type(e).__name__)
        failed = set(offsets)
        return [(t, [(p, ErrorCode.COORDINATOR_NOT_AVAILABLE if (t, p) in failed else c) for p, c in parts])
                for t, parts in results]

    def _commit_lock(self, group_id: str) -> asyncio.Lock:
        group = self._groups.get(group_id)
        if group is not None:
            return group.commit_lock
        locks = self._standalone_locks
        lock = locks.get(group_id)
        if lock is None:
            lock = locks[group_id] = asyncio.Lock()
        if len(locks) > 10_000:  # offsets-only groups: keep the table bounded (only unlocked ones go)
            for gid in [g for g, lk in locks.items() if not lk.locked() and g != group_id][:5_000]:
                del locks[gid]
        return lock

    # ------------------------------------------------------------------ OffsetFetch
    def fetch(self, group_id: str, topics: list[tuple[str, list[int]]] | None
              ) -> tuple[int, list[tuple[str, list[FetchedOffset]]]] | Awaitable[
                  tuple[int, list[tuple[str, list[FetchedOffset]]]]]:
        """(group error, [(topic, [FetchedOffset])]); topics None = every committed partition."""
        code = self._groups.validate_group(group_id)
        if code:
            return code, [(t, [FetchedOffset(p, error_code=code) for p in parts]) for t, parts in topics or []]
        return self._read_offsets(group_id, topics)

    async def fetch_zookeeper_group(self, group_id: str, topics: list[tuple[str, list[int]]]
                                    ) -> tuple[int, list[tuple[str, list[FetchedOffset]]]]:
        """OffsetFetch v0 (Kafka 0.8.1): the ZooKeeper group's committed offsets (/consumers/<group>/offsets), which
        any broker can read (no coordinator: nothing of it is held here)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, [(t, [FetchedOffset(p, error_code=ErrorCode.INVALID_GROUP_ID)
                                                     for p in parts]) for t, parts in topics]
        wanted = [(t, p) for t, parts in topics for p in parts]
        try:
            found = await self._groups.run_in_executor(self._executor, fetch_zookeeper_offsets, self._zk_client(),
                                                       group_id, wanted)
        except Exception as e:
            log.warning("group %s: reading its ZooKeeper offsets failed: %s", group_id, e or type(e).__name__)
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            return code, [(t, [FetchedOffset(p, error_code=code) for p in parts]) for t, parts in topics]
        return ErrorCode.NONE, [(t, [FetchedOffset(p, found.get((t, p), -1)) for p in parts]) for t, parts in topics]

    async def _read_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None
                            ) -> tuple[int, list[tuple[str, list[FetchedOffset]]]]:
        wanted = None if topics is None else [(t, p) for t, parts in topics for p in parts]
        try:
            found = await self._groups.run_in_executor(self._executor, fetch_offsets, self._zk_client(), group_id,
                                                       wanted)
        except Exception as e:
            log.warning("group %s: reading offsets from ZooKeeper failed: %s", group_id, e or type(e).__name__)
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            return code, [(t, [FetchedOffset(p, error_code=code) for p in parts]) for t, parts in topics or []]
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(found):
                by_topic.setdefault(t, []).append(p)
            topics = list(by_topic.items())
        out = []
        for t, parts in topics:
            rows = []
            for p in parts:
                c = found.get((t, p))
                rows.append(FetchedOffset(p) if c is None else FetchedOffset(p, c.offset, c.leader_epoch, c.metadata))
            out.append((t, rows))
        return ErrorCode.NONE, out
