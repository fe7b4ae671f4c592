"""Producer ids for idempotent producers, unique across brokers and restarts.

Brokers claim blocks of ids from one ZooKeeper znode under the cluster chroot with a compare-and-set on
the znode version (as Kafka's ZooKeeper-era broker did); ids inside a block are handed out from memory.
A crash wastes the rest of a block, never reuses an id.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
BLOCK_SIZE = 1000
MAX_CAS_ATTEMPTS = 50


class ProducerIdManager:
    def __init__(self, client_supplier: Callable[[], KazooClient], broker_id: int,
                 block_size: int = BLOCK_SIZE) -> None:
        self._client = client_supplier  # the registry's KazooClient (it changes when the session is renewed)
        self.broker_id = broker_id
        self.block_size = block_size
        self._next = 0
        self._end = 0  # exclusive
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                start = await asyncio.get_running_loop().run_in_executor(None, self._claim_block)
                self._next, self._end = start, start + self.block_size
            pid = self._next
            self._next += 1
            return pid

    def _claim_block(self) -> int:
        """Blocking: claim the next block with a CAS on the znode version."""
        zk = self._client()
        for _ in range(MAX_CAS_ATTEMPTS):
            try:
                data, stat = zk.get(PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                doc = self._doc(0)
                try:
                    zk.create(PRODUCER_ID_BLOCK_PATH, doc, makepath=True)
                    return 0
                except NodeExistsError:
                    continue
            start = int(json.loads(data)["block_end"]) + 1
            try:
                zk.set(PRODUCER_ID_BLOCK_PATH, self._doc(start), version=stat.version)
            except BadVersionError:
                continue
            log.info("claimed producer id block %d-%d", start, start + self.block_size - 1)
            return start
        raise RuntimeError("could not claim a producer id block (too much contention)")

    def _doc(self, start: int) -> bytes:
        return json.dumps({"version": 1, "broker": self.broker_id, "block_start": start,
                           "block_end": start + self.block_size - 1}).encode()
