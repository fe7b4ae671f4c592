"""TransactionCoordinator: Kafka's transaction coordinator (KIP-98) over a ZooKeeper store (docs/transactions.md).

Which broker coordinates a transactional id is the groups' pure function (``coordinator_for``: crc32 of the
id over the sorted live brokers), so every broker answers FindCoordinator alike; when the coordinator dies
its ids move to the survivors, which load them from ZooKeeper (transaction_state.py) and carry on: an open
transaction times out, a decided one (PrepareCommit/PrepareAbort) is completed.

State machine per transactional id (Kafka's): Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn)
-> PrepareCommit | PrepareAbort (EndTxn, a timeout, a new producer's InitProducerId) -> CompleteCommit |
CompleteAbort once every partition has its marker and, on commit, the group offsets are committed ->
Ongoing again with the next transaction. Every transition is written to ZooKeeper (conditionally on the
znode's version) before it is acted on or answered, so a coordinator crash loses no decision.

Fencing: InitProducerId bumps the epoch (aborting an open transaction with the bumped epoch first, so every
partition of it knows the new epoch); requests with an older epoch get PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
before v2); a timed-out transaction is aborted with a bumped epoch too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ferry.broker.server.group_coordinator_state import coordinator_for
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.producer_id_manager import ProducerIdManager
from ferry.broker.server.task_cancel import cancel_and_wait
from ferry.broker.server.transaction_markers import TxnMarkerWriter
from ferry.broker.server.transaction_state import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    TopicPartition,
    TxnMetadata,
    list_txn_ids,
    now_ms,
    read_txn,
    settle_pending_offsets,
    write_txn,
)
from ferry.wire.protocol.errors import ErrorCode
from ferry.zk.znodes import BrokerInfo

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_EPOCH = 32767
COMPLETION_RETRY_S = 0.5


@dataclass(frozen=True)
class TxnSettings:
    """Kafka's broker names: transaction.max.timeout.ms, transaction.abort.timed.out.transaction.cleanup.interval.ms."""

    max_timeout_ms: int = 900_000
    check_interval_ms: int = 10_000
    marker_wait_ms: int = 10_000  # EndTxn answers after this even if markers are still being retried


def fenced_code(version: int) -> int:
    """PRODUCER_FENCED from the versions that know it (v2 of AddPartitions/AddOffsets/EndTxn), else
    INVALID_PRODUCER_EPOCH (what Kafka answers older clients)."""
    return ErrorCode.PRODUCER_FENCED if version >= 2 else ErrorCode.INVALID_PRODUCER_EPOCH


class TransactionCoordinator:
    def __init__(self, broker_id: int, metadata: MetadataCache, zk_client: Callable[[], KazooClient],
                 executor: Executor, producer_ids: ProducerIdManager, markers: TxnMarkerWriter,
                 settings: TxnSettings | None = None) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.zk_client = zk_client
        self.executor = executor
        self.producer_ids = producer_ids
        self.markers = markers
        self.settings = settings or TxnSettings()
        self.txns: dict[str, TxnMetadata] = {}  # the ids coordinated here, as last written or read
        self._locks: dict[str, asyncio.Lock] = {}
        self._completing: dict[str, asyncio.Task] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._reload = True

    # ------------------------------------------------------------------ life cycle
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.metadata.add_brokers_listener(self._on_brokers_threadsafe)
        self._task = loop.create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait([self._task, *self._completing.values()])
        await self.markers.close()
        self.loop = None

    def _on_brokers_threadsafe(self, brokers: dict[int, BrokerInfo]) -> None:
        self._reload = True  # ids may have moved here (or away): the loop looks again

    # ------------------------------------------------------------------ placement
    def coordinator(self, txn_id: str) -> BrokerInfo | None:
        live = self.metadata.brokers
        node = coordinator_for(txn_id, live)
        return None if node is None else live.get(node)

    def validate(self, txn_id: str) -> int:
        if not txn_id:
            return ErrorCode.INVALID_REQUEST
        if self.loop is None or self.broker_id not in self.metadata.brokers:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if coordinator_for(txn_id, self.metadata.brokers) != self.broker_id:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    # ------------------------------------------------------------------ state access
    def _lock(self, txn_id: str) -> asyncio.Lock:
        lock = self._locks.get(txn_id)
        if lock is None:
            if len(self._locks) > 10_000:
                for k in [k for k, lk in self._locks.items() if not lk.locked()][:5_000]:
                    del self._locks[k]
            lock = self._locks[txn_id] = asyncio.Lock()
        return lock

    async def _zk(self, fn: Callable[..., T], *args: object) -> T:
        assert self.loop is not None
        return await self.loop.run_in_executor(self.executor, fn, self.zk_client(), *args)

    async def _load(self, txn_id: str) -> TxnMetadata | None:
        meta = self.txns.get(txn_id)
        if meta is None:
            meta = await self._zk(read_txn, txn_id)
            if meta is not None:
                self.txns[txn_id] = meta
        return meta

    async def _write(self, meta: TxnMetadata) -> bool:
        """Persist ``meta`` (conditionally); False when another coordinator wrote the id in between (it is
        forgotten here and read again next time)."""
        meta.update_ms = now_ms()
        try:
            meta.version = await self._zk(write_txn, meta)
        except (BadVersionError, NodeExistsError, NoNodeError):
            log.warning("transaction %r changed in ZooKeeper under this coordinator; reloading it", meta.txn_id)
            self.txns.pop(meta.txn_id, None)
            return False
        self.txns[meta.txn_id] = meta
        return True

    # ------------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, txn_id: str, timeout_ms: int) -> tuple[int, int, int]:
        """(error, producer id, epoch) for a transactional producer starting (or restarting)."""
        code = self.validate(txn_id)
        if code:
            return code, -1, -1
        if timeout_ms <= 0 or timeout_ms > self.settings.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        async with self._lock(txn_id):
            meta = await self._load(txn_id)
            if meta is None:
                pid = await self.producer_ids.next_id()
                meta = TxnMetadata(txn_id, pid, 0, timeout_ms)
                if not await self._write(meta):
                    return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
                log.info("transactional id %r: producer id %d epoch 0", txn_id, pid)
                return ErrorCode.NONE, pid, 0
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT) and not await self._complete(meta):
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            meta = self.txns.get(txn_id)
            if meta is None:
                return ErrorCode.NOT_COORDINATOR, -1, -1
            if meta.state == ONGOING:
                log.info("transactional id %r: a new producer fences epoch %d; aborting its open transaction",
                         txn_id, meta.producer_epoch)
                if not await self._abort(meta, fence=True):
                    return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
                meta = self.txns.get(txn_id)
                if meta is None:
                    return ErrorCode.NOT_COORDINATOR, -1, -1
            new = meta.copy()
            if new.producer_epoch >= MAX_EPOCH - 1:  # the epoch would overflow: a new producer id
                new.producer_id, new.producer_epoch = await self.producer_ids.next_id(), 0
            else:
                new.producer_epoch += 1
            new.timeout_ms, new.state = timeout_ms, EMPTY
            new.partitions, new.groups = set(), set()
            if not await self._write(new):
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            log.info("transactional id %r: producer id %d epoch %d", txn_id, new.producer_id, new.producer_epoch)
            return ErrorCode.NONE, new.producer_id, new.producer_epoch

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn
    def _request_error(self, meta: TxnMetadata | None, pid: int, epoch: int, version: int) -> int:
        if meta is None or meta.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != meta.producer_epoch:
            return fenced_code(version)
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.NONE

    async def add_partitions(self, txn_id: str, pid: int, epoch: int, tps: list[TopicPartition],
                             version: int) -> dict[TopicPartition, int]:
        code = self.validate(txn_id)
        if code:
            return dict.fromkeys(tps, code)
        topics = self.metadata.topics
        unknown = {tp for tp in tps if tp[0] not in topics or tp[1] not in topics[tp[0]].partitions}
        async with self._lock(txn_id):
            meta = await self._load(txn_id)
            code = self._request_error(meta, pid, epoch, version)
            if code:
                return dict.fromkeys(tps, code)
            if unknown:
                return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                        for tp in tps}
            code = await self._add(meta, set(tps), set())
            return dict.fromkeys(tps, code)

    async def add_offsets(self, txn_id: str, pid: int, epoch: int, group: str, version: int) -> int:
        code = self.validate(txn_id)
        if code:
            return code
        if not group:
            return ErrorCode.INVALID_GROUP_ID
        async with self._lock(txn_id):
            meta = await self._load(txn_id)
            code = self._request_error(meta, pid, epoch, version)
            return code or await self._add(meta, set(), {group})

    async def _add(self, meta: TxnMetadata, tps: set[TopicPartition], groups: set[str]) -> int:
        if meta.state == ONGOING and tps <= meta.partitions and groups <= meta.groups:
            return ErrorCode.NONE
        new = meta.copy()
        if new.state != ONGOING:  # the producer's next transaction begins
            new.state, new.start_ms, new.txn_seq = ONGOING, now_ms(), new.txn_seq + 1
            new.partitions, new.groups = set(), set()
        new.partitions |= tps
        new.groups |= groups
        return ErrorCode.NONE if await self._write(new) else ErrorCode.NOT_COORDINATOR

    # ------------------------------------------------------------------ EndTxn
    async def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool, version: int) -> int:
        code = self.validate(txn_id)
        if code:
            return code
        async with self._lock(txn_id):
            meta = await self._load(txn_id)
            if meta is None or meta.producer_id != pid:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING
            if epoch != meta.producer_epoch:
                return fenced_code(version)
            target = PREPARE_COMMIT if commit else PREPARE_ABORT
            if meta.state == ONGOING:
                new = meta.copy()
                new.state = target
                if not await self._write(new):
                    return ErrorCode.NOT_COORDINATOR
                log.debug("transaction %r (producer %d epoch %d): %s", txn_id, pid, epoch, target)
                meta = new
            elif meta.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
                return ErrorCode.NONE  # a retry of an EndTxn that completed
            elif meta.state != target:
                return ErrorCode.INVALID_TXN_STATE
            deadline = time.monotonic() + self.settings.marker_wait_ms / 1000.0
            if not await self._complete(meta, deadline):
                self._complete_later(txn_id)  # decided and durable: the markers follow
            return ErrorCode.NONE

    # ------------------------------------------------------------------ completion
    async def _abort(self, meta: TxnMetadata, fence: bool) -> bool:
        """Decide to abort ``meta``'s open transaction (with a bumped epoch when fencing) and complete it."""
        new = meta.copy()
        if fence:
            new.producer_epoch += 1
        new.state = PREPARE_ABORT
        if not await self._write(new):
            return False
        return await self._complete(new)

    async def _complete(self, meta: TxnMetadata, deadline: float | None = None) -> bool:
        """Markers on every partition, group offsets committed (or dropped), then Complete*. False when not every
        marker could be written by ``deadline`` (the state stays Prepare*; retried later)."""
        commit = meta.state == PREPARE_COMMIT
        if deadline is None:
            deadline = time.monotonic() + self.settings.marker_wait_ms / 1000.0
        missing = await self.markers.write(meta.producer_id, meta.producer_epoch, commit, meta.partitions, deadline)
        if missing:
            log.info("transaction %r: %d partition(s) still without their %s marker: %s", meta.txn_id,
                     len(missing), "commit" if commit else "abort", sorted(missing)[:5])
            return False
        for group in sorted(meta.groups):
            try:
                await self._zk(settle_pending_offsets, meta, group, commit)
            except Exception as e:
                log.warning("transaction %r: offsets of group %s not settled: %s", meta.txn_id, group,
                            str(e) or type(e).__name__)
                return False
        new = meta.copy()
        new.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        new.partitions, new.groups = set(), set()
        if not await self._write(new):
            return False
        log.debug("transaction %r (producer %d epoch %d): %s", meta.txn_id, meta.producer_id, meta.producer_epoch,
                  new.state)
        return True

    def _complete_later(self, txn_id: str) -> None:
        task = self._completing.get(txn_id)
        if (task is None or task.done()) and self.loop is not None:
            self._completing[txn_id] = self.loop.create_task(self._completion_loop(txn_id))

    async def _completion_loop(self, txn_id: str) -> None:
        try:
            while self.loop is not None:
                await asyncio.sleep(COMPLETION_RETRY_S)
                if self.validate(txn_id):
                    return
                async with self._lock(txn_id):
                    meta = await self._load(txn_id)
                    if meta is None or meta.state not in (PREPARE_COMMIT, PREPARE_ABORT):
                        return
                    if await self._complete(meta):
                        return
        finally:
            self._completing.pop(txn_id, None)

    # ------------------------------------------------------------------ timeouts, failover
    async def _run(self) -> None:
        while True:
            try:
                if self._reload:
                    self._reload = False
                    await self._load_owned()
                await self._check_timeouts()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction coordinator pass failed")
            await asyncio.sleep(self.settings.check_interval_ms / 1000.0)

    async def _load_owned(self) -> None:
        """Forget ids that moved away; read the ids that hash here (after a start or a broker change)."""
        live = self.metadata.brokers
        if self.broker_id not in live:
            self._reload = True
            return
        for txn_id in [t for t in self.txns if coordinator_for(t, live) != self.broker_id]:
            del self.txns[txn_id]
        ids = await self._zk(list_txn_ids)
        for txn_id in ids:
            if coordinator_for(txn_id, live) == self.broker_id and txn_id not in self.txns:
                async with self._lock(txn_id):
                    meta = await self._zk(read_txn, txn_id)
                    if meta is not None:
                        self.txns.setdefault(txn_id, meta)
                        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                            self._complete_later(txn_id)

    async def _check_timeouts(self) -> None:
        now = now_ms()
        for txn_id, meta in list(self.txns.items()):
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                self._complete_later(txn_id)
            if meta.state != ONGOING or now < meta.start_ms + meta.timeout_ms or self.validate(txn_id):
                continue
            async with self._lock(txn_id):
                meta = self.txns.get(txn_id)
                if meta is None or meta.state != ONGOING or now_ms() < meta.start_ms + meta.timeout_ms:
                    continue
                log.info("transaction %r (producer %d epoch %d) timed out after %d ms: aborting it", txn_id,
                         meta.producer_id, meta.producer_epoch, meta.timeout_ms)
                if not await self._abort(meta, fence=True):
                    self._complete_later(txn_id)

