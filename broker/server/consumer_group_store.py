"""ConsumerGroupStore: KIP-848 groups' state in ZooKeeper (ferry.zk.consumer_group_state), read and written off
the event loop, so that a coordinator restart or move keeps each group's epoch and assignment (Kafka keeps them
in ``__consumer_offsets``; ferry keeps committed offsets in ZooKeeper, and this beside them).

A write is conditional on the znode version this coordinator last read or wrote: a coordinator that lost the
group to another (which wrote since) gets StaleGroupState and drops the group, never overwriting the newer state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor

from kazoo.client import KazooClient

from ferry.zk.consumer_group_state import StaleGroupState, read_group_state, write_group_state

__all__ = ["ConsumerGroupStore", "StaleGroupState"]


class ConsumerGroupStore:
    """Reads and conditionally writes one group's stored state (a JSON document) in a worker thread."""

    def __init__(self, zk_client: Callable[[], KazooClient], executor: Executor) -> None:
        self._zk_client = zk_client
        self._executor = executor

    async def load(self, group_id: str) -> tuple[dict | None, int]:
        """(state document or None, znode version or -1 when the group has no znode)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, read_group_state, self._zk_client(), group_id)

    async def save(self, group_id: str, doc: dict, version: int) -> int:
        """Write ``doc`` if the znode is still at ``version``; the new version. StaleGroupState otherwise."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, write_group_state, self._zk_client(), group_id, doc,
                                          version)
