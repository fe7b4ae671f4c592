"""ConsumerGroupPersistence: loads KIP-848 groups from ZooKeeper when a request first reaches their coordinator,
and saves a group whenever a heartbeat (or a session expiry) changed what Kafka would write to
``__consumer_offsets`` — the answer waits for the write, so an acknowledged epoch or assignment survives the
coordinator. The rules stay ConsumerGroupCoordinator's; this is its bridge to ConsumerGroupStore.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ferry.broker.server.consumer_group_coordinator import ConsumerGroupCoordinator, HeartbeatAnswer
from ferry.broker.server.consumer_group_state import ConsumerGroup, from_doc, to_doc
from ferry.broker.server.consumer_group_store import ConsumerGroupStore, StaleGroupState
from ferry.wire.protocol.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from ferry.wire.protocol.errors import ErrorCode

log = logging.getLogger("ferry.broker.server.consumer_group_coordinator")


class ConsumerGroupPersistence:
    """Load-on-first-use and save-on-change of the consumer groups coordinated here."""

    def __init__(self, groups: ConsumerGroupCoordinator, store: ConsumerGroupStore) -> None:
        self._groups = groups
        self._store = store
        self._versions: dict[str, int] = {}  # group -> its znode version as last read or written here
        self._loading: dict[str, asyncio.Future] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._unsaved: set[str] = set()  # a write failed: the next heartbeat writes again
        self._background: set[asyncio.Task] = set()
        groups.on_change = self._save_soon

    def ensure_loaded(self, group_id: str) -> Awaitable[None] | None:
        """None when the group's stored state was read here already; else what to await first."""
        if group_id in self._versions:
            return None
        future = self._loading.get(group_id)
        if future is None:
            future = self._loading[group_id] = asyncio.ensure_future(self._load(group_id))
        return asyncio.shield(future)

    async def _load(self, group_id: str) -> None:
        try:
            doc, version = await self._store.load(group_id)
        finally:
            self._loading.pop(group_id, None)
        if group_id in self._versions:
            return
        self._versions[group_id] = version
        if doc is None or group_id in self._groups.groups:
            return
        try:
            group = from_doc(group_id, doc)
        except (ValueError, TypeError, KeyError) as e:
            log.error("group %s: stored consumer-group state unreadable (%s); the group starts over", group_id, e)
            return
        if group.members:
            self._groups.adopt(group)
            log.info("group %s: loaded at group epoch %d with %d member(s)", group_id, group.epoch,
                     len(group.members))

    def heartbeat(self, req: ConsumerGroupHeartbeatRequest, client_id: str, client_host: str
                  ) -> HeartbeatAnswer | Awaitable[HeartbeatAnswer]:
        """The coordinator's answer, once the group is loaded and any change it made is in ZooKeeper."""
        loading = self.ensure_loaded(req.group_id) if req.group_id else None
        if loading is not None:
            return self._after_load(loading, req, client_id, client_host)
        return self._heartbeat(req, client_id, client_host)

    async def _after_load(self, loading: Awaitable[None], req: ConsumerGroupHeartbeatRequest, client_id: str,
                          client_host: str) -> HeartbeatAnswer:
        try:
            await loading
        except Exception as e:
            log.warning("group %s: reading its state from ZooKeeper failed: %s", req.group_id, e or type(e).__name__)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group's state could not be read", None, -1, None
        answer = self._heartbeat(req, client_id, client_host)
        return answer if isinstance(answer, tuple) else await answer

    def _heartbeat(self, req: ConsumerGroupHeartbeatRequest, client_id: str, client_host: str
                   ) -> HeartbeatAnswer | Awaitable[HeartbeatAnswer]:
        coordinator = self._groups
        before = coordinator.persisted(req.group_id, req.member_id)
        group = coordinator.groups.get(req.group_id)
        answer = coordinator.heartbeat(req, client_id, client_host)
        group = coordinator.groups.get(req.group_id) or group  # the last member left: the emptied group is saved
        if group is None or (coordinator.persisted(req.group_id, answer[2]) == before
                             and req.group_id not in self._unsaved and group.group_id in coordinator.groups):
            return answer
        return self._answer_saved(group, answer)

    async def _answer_saved(self, group: ConsumerGroup, answer: HeartbeatAnswer) -> HeartbeatAnswer:
        code = await self._save(group)
        if code:
            return code, "the group's state could not be written", answer[2], -1, None
        return answer

    async def _save(self, group: ConsumerGroup) -> int:
        """Write the group's current state (one write at a time per group, each the latest); an error code."""
        gid = group.group_id
        lock = self._locks.setdefault(gid, asyncio.Lock())
        async with lock:
            if gid not in self._versions:
                return ErrorCode.NOT_COORDINATOR  # unloaded meanwhile (moved away, or stopping)
            current = self._groups.groups.get(gid) or group
            try:
                self._versions[gid] = await self._store.save(gid, to_doc(current), self._versions[gid])
                self._unsaved.discard(gid)
                return ErrorCode.NONE
            except StaleGroupState as e:
                log.warning("%s: dropping the group here", e)
                self.unload(lambda g: g != gid)
                return ErrorCode.NOT_COORDINATOR
            except Exception as e:
                log.warning("group %s: writing its state to ZooKeeper failed: %s", gid, e or type(e).__name__)
                self._unsaved.add(gid)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE

    def _save_soon(self, group: ConsumerGroup) -> None:
        """A change no request waits for (a member's session expired): saved in the background."""
        task = asyncio.get_running_loop().create_task(self._save(group))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def unload(self, keep: Callable[[str], bool]) -> None:
        """Drop the groups ``keep`` rejects, and what is known of their stored state (read again if they
        come back here)."""
        self._groups.unload(keep)
        for gid in [g for g in self._versions if not keep(g)]:
            del self._versions[gid]
            self._unsaved.discard(gid)
