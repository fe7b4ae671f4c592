"""OffsetExpiry: committed offsets expire as Kafka's do (``offsets.retention.minutes``, KIP-211).

Every ``offsets.retention.check.interval.ms`` the coordinator looks at the groups it coordinates: a group without
members loses each offset once ``offsets.retention.minutes`` have passed since the later of its commit and the
moment the group was first seen empty here, and the group itself once nothing is left (ListGroups no longer
shows it); a consumer group with members loses only the offsets of topics no member subscribes to, counted from
their commit. "Seen empty" is this broker's observation: after a coordinator move or restart the clock starts
again, so offsets are kept longer, never dropped early. Deletions are conditional on the znode's version, so a
commit that lands meanwhile is kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor

from kazoo.client import KazooClient

from ferry.broker.server.group_coordinator_state import GroupMetadataManager, GroupSettings
from ferry.zk import group_offsets
from ferry.zk.group_offsets import CommittedOffset, TopicPartition

log = logging.getLogger(__name__)


class OffsetExpiry:
    """The periodic sweep over the groups coordinated here."""

    def __init__(self, groups: GroupMetadataManager, settings: GroupSettings, zk_client: Callable[[], KazooClient],
                 executor: Executor) -> None:
        self._groups = groups
        self._settings = settings
        self._zk_client = zk_client
        self._executor = executor
        self._empty_since: dict[str, int] = {}  # group -> ms when first seen without members here
        self._task: asyncio.Task | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._task = loop.create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        interval = self._settings.offsets_retention_check_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # ZooKeeper away: the next sweep tries again
                log.warning("expiring committed offsets failed: %s", e or type(e).__name__)

    async def sweep(self, now_ms: int | None = None) -> int:
        """One pass; returns how many offsets expired."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        client = self._zk_client()
        stored = await self._groups.run_in_executor(self._executor, group_offsets.list_groups, client)
        retention = self._settings.offsets_retention_ms
        total = 0
        for gid in stored:
            if not self._groups.coordinated_here(gid):
                self._empty_since.pop(gid, None)
                continue
            group = self._groups.get(gid)
            if group is not None and group.members:
                self._empty_since.pop(gid, None)
                if group.protocol_type != "consumer":
                    continue
                subscribed = group.subscribed_topics()

                def expired(tp: TopicPartition, c: CommittedOffset, subscribed: set[str] = subscribed) -> bool:
                    return tp[0] not in subscribed and c.commit_timestamp + retention <= now
                drop = False
            else:
                since = self._empty_since.setdefault(gid, now)

                def expired(tp: TopicPartition, c: CommittedOffset, since: int = since) -> bool:
                    return max(c.commit_timestamp, since) + retention <= now
                drop = True
            removed, dropped = await self._groups.run_in_executor(
                self._executor, group_offsets.expire_offsets, client, gid, expired, drop)
            total += removed
            if removed:
                log.info("group %s: %d committed offset(s) expired (offsets.retention.minutes)", gid, removed)
            if dropped:
                self._empty_since.pop(gid, None)
                current = self._groups.get(gid)
                if current is not None and not current.members:
                    self._groups.unload(current, 0)
                log.info("group %s: removed (empty, every offset expired)", gid)
        return total
