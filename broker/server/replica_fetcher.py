"""Replica fetchers: a follower copies its leaders' logs by fetching as consumers do (Kafka's
ReplicaFetcherThread, one per source broker, here one asyncio task per leader on the broker's loop).

Each Fetch carries this broker's id as ``replica_id``, so the leader reads up to its log end (not the high
watermark), records our log end offset from the fetch offset, and answers from the same sendfile path as
for consumers. The batches are appended as the leader wrote them (same offsets, same bytes); the leader's
high watermark comes back with every answer.

Before the first fetch after a leader change the follower truncates its log where it diverges from the
new leader's, asking the leader for the end offset of its own latest leader epoch (OffsetForLeaderEpoch,
KIP-101/KIP-279), never to its high watermark alone: HW-only truncation loses acknowledged data or leaves
replicas diverged (the two anomalies of KIP-101). ``replica.truncation=high-watermark`` restores the
pre-KIP-101 behaviour; it exists only to demonstrate those anomalies in tests (docs/replication.md).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ferry.broker.log.log_start import delete_records_before
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.partition import Partition
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.task_cancel import cancel_and_wait
from ferry.wire.async_broker_connection import AsyncBrokerConnection
from ferry.wire.protocol import fetch, offset_for_leader_epoch
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.record.record_batch import BATCH_HEADER_SIZE, read_header
from ferry.wire.sasl_login import ClientSecurity

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
TRUNCATE_BY_EPOCH = "leader-epoch"
TRUNCATE_TO_HW = "high-watermark"


@dataclass(slots=True)
class FetchState:
    leader_epoch: int
    truncated: bool = False  # truncation done for this leader epoch
    backoff_until: float = 0.0


@dataclass(frozen=True)
class FetcherSettings:
    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1_048_576
    socket_timeout_ms: int = 30_000
    backoff_ms: int = 1000
    truncation: str = TRUNCATE_BY_EPOCH
    security: ClientSecurity | None = None  # TLS/SASL towards the leaders (a secured inter-broker listener)


class ReplicaFetcherManager:
    """Routes each followed partition to the fetcher of its leader."""

    def __init__(self, broker_id: int, metadata: MetadataCache, replicas: ReplicaManager,
                 settings: FetcherSettings) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.replicas = replicas
        self.settings = settings
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.paused: set[TopicPartition] = set()  # partitions whose fetching is held (controlled shutdown)

    def add_partition(self, tp: TopicPartition, leader: int, leader_epoch: int) -> None:
        for source, f in self.fetchers.items():
            if source != leader:
                f.partitions.pop(tp, None)
        f = self.fetchers.get(leader)
        if f is None or f.task is None or f.task.done():
            f = self.fetchers[leader] = ReplicaFetcher(self, leader)
            f.start()
        f.partitions[tp] = FetchState(leader_epoch)
        f.wake.set()

    def remove_partition(self, tp: TopicPartition) -> None:
        for f in self.fetchers.values():
            f.partitions.pop(tp, None)

    def followed(self) -> dict[TopicPartition, int]:
        return {tp: leader for leader, f in self.fetchers.items() for tp in f.partitions}

    async def shutdown(self) -> None:
        for f in list(self.fetchers.values()):
            await f.stop()
        self.fetchers.clear()


class ReplicaFetcher:
    def __init__(self, manager: ReplicaFetcherManager, leader: int) -> None:
        self.manager = manager
        self.leader = leader
        self.partitions: dict[TopicPartition, FetchState] = {}
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None
        self._conn: AsyncBrokerConnection | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader}")

    async def stop(self) -> None:
        await cancel_and_wait([self.task])
        self._close()

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        settings = self.manager.settings
        while True:
            active = self._active()
            if not active:
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), 1.0 if self.partitions else 5.0)
                except TimeoutError:
                    pass
                continue
            try:
                self._connect()
                await self._truncate([tp for tp in active if not self.partitions[tp].truncated])
                await self._fetch_once([tp for tp in active if tp in self.partitions and
                                        self.partitions[tp].truncated])
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("replica fetcher from broker %d: %s; retrying", self.leader, str(e) or type(e).__name__)
                self._close()
                await asyncio.sleep(settings.backoff_ms / 1000.0)

    def _active(self) -> list[TopicPartition]:
        loop = asyncio.get_running_loop()
        now = loop.time()
        paused = self.manager.paused
        return [tp for tp, st in self.partitions.items() if st.backoff_until <= now and tp not in paused]

    def _connect(self) -> None:
        """The connection to the leader as registered now (connected on its first request)."""
        if self._conn is not None:
            return
        broker = self.manager.metadata.brokers.get(self.leader)
        if broker is None:
            raise ConnectionError(f"leader {self.leader} is not registered")
        self._conn = AsyncBrokerConnection(self.leader, broker.host, broker.port,
                                           f"replica-{self.manager.broker_id}",
                                           self.manager.settings.socket_timeout_ms / 1000.0,
                                           self.manager.settings.security)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    async def _call(self, request: tuple[int, int, list], timeout_s: float) -> memoryview:
        assert self._conn is not None
        return await self._conn.request(*request, timeout_s)

    # ------------------------------------------------------------------ truncation
    async def _truncate(self, tps: list[TopicPartition]) -> None:
        if not tps:
            return
        rm = self.manager.replicas
        if self.manager.settings.truncation == TRUNCATE_TO_HW:
            for tp in tps:
                part = rm.partitions.get(tp)
                if part is not None:
                    hw = part.log.replication_hw
                    part.log.truncate_to(part.log.log_end_offset if hw is None else hw)
                self.partitions[tp].truncated = True
            return
        by_topic: dict[str, list[offset_for_leader_epoch.EpochRequestPartition]] = {}
        asked: dict[TopicPartition, int] = {}
        for tp in tps:
            part = rm.partitions.get(tp)
            if part is None:
                continue
            epoch = part.log.leader_epoch_cache.latest_epoch
            asked[tp] = epoch
            if epoch < 0:
                continue  # nothing written under any epoch: nothing to truncate
            by_topic.setdefault(tp[0], []).append(offset_for_leader_epoch.EpochRequestPartition(
                tp[1], epoch, self.partitions[tp].leader_epoch))
        answers: dict[str, list[offset_for_leader_epoch.EpochEndOffset]] = {}
        if by_topic:
            body = await self._call(offset_for_leader_epoch.encode_request(
                list(by_topic.items()), self.manager.broker_id), self.manager.settings.socket_timeout_ms / 1000)
            answers = offset_for_leader_epoch.parse_response(body)
        for tp, epoch in asked.items():
            part = rm.partitions.get(tp)
            st = self.partitions.get(tp)
            if part is None or st is None:
                continue
            lg = part.log
            if epoch < 0:
                st.truncated = True
                continue
            answer = next((a for a in answers.get(tp[0], []) if a.partition == tp[1]), None)
            if answer is None or answer.error_code:
                code = answer.error_code if answer is not None else -1
                log.info("%s-%d: OffsetForLeaderEpoch answered %s; retrying later", tp[0], tp[1],
                         ErrorCode(code).name if code in ErrorCode._value2member_map_ else code)
                st.backoff_until = asyncio.get_running_loop().time() + self.manager.settings.backoff_ms / 1000
                continue
            if answer.end_offset < 0:
                target = lg.log_end_offset  # the leader knows no epoch at or below ours: keep what we have
            elif answer.leader_epoch == epoch:
                target = min(answer.end_offset, lg.log_end_offset)
            else:  # the leader's latest epoch at or below ours is older: our end for that epoch bounds it too
                ours = lg.leader_epoch_cache.end_offset_for(answer.leader_epoch, lg.log_end_offset)[1]
                target = min(answer.end_offset, lg.log_end_offset, ours if ours >= 0 else lg.log_end_offset)
            if target < lg.log_end_offset:
                log.info("%s-%d: truncating from %d to %d (leader %d's end of epoch %d)", tp[0], tp[1],
                         lg.log_end_offset, target, self.leader, answer.leader_epoch)
                lg.truncate_to(target)
            st.truncated = True

    # ------------------------------------------------------------------ fetching
    async def _fetch_once(self, tps: list[TopicPartition]) -> None:
        if not tps:
            return
        rm = self.manager.replicas
        s = self.manager.settings
        by_topic: dict[str, list[fetch.FetchPartition]] = {}
        asked: dict[TopicPartition, int] = {}  # the offset each partition was fetched from
        for tp in tps:
            part = rm.partitions.get(tp)
            if part is None:
                continue
            lg = part.log
            asked[tp] = lg.log_end_offset
            by_topic.setdefault(tp[0], []).append(fetch.FetchPartition(
                tp[1], lg.log_end_offset, s.max_bytes, self.partitions[tp].leader_epoch, lg.log_start_offset))
        if not by_topic:
            return
        request = fetch.encode_request(list(by_topic.items()), s.wait_max_ms, s.min_bytes, s.max_bytes * 4,
                                       replica_id=self.manager.broker_id)
        body = await self._call(request, (s.socket_timeout_ms + s.wait_max_ms) / 1000.0)
        answer = fetch.parse_response(body)
        loop = asyncio.get_running_loop()
        for topic, results in answer.topics.items():
            for res in results:
                tp = (topic, res.partition)
                st = self.partitions.get(tp)
                part = rm.partitions.get(tp)
                if st is None or part is None or part.is_leader:
                    continue  # the role changed while the request was out
                if res.error_code:
                    self._on_error(tp, part, res, st, loop.time())
                    continue
                records = res.records
                lg = part.log
                if records is not None and len(records) >= BATCH_HEADER_SIZE:
                    whole = _whole_batches(records)
                    if whole:
                        first = read_header(whole, 0).base_offset
                        end = lg.log_end_offset
                        # a compacted leader's log has holes: its answer may start after the offset asked for
                        gap = first > end == asked.get(tp) and lg.config.compact
                        if first != end and not gap:
                            continue  # truncated meanwhile: the next fetch asks again from our end
                        lg.append_as_follower(whole)
                lg.set_replication_hw(min(res.high_watermark, lg.log_end_offset))
                if res.log_start_offset > lg.log_start_offset:  # DeleteRecords on the leader: follow it
                    start = min(res.log_start_offset, lg.high_watermark)
                    if start > lg.log_start_offset:
                        delete_records_before(lg, start)

    def _on_error(self, tp: TopicPartition, part: Partition, res: fetch.PartitionFetchResult, st: FetchState,
                  now: float) -> None:
        code = res.error_code
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE and res.log_start_offset > part.log.log_end_offset >= 0:
            log.warning("%s-%d: our end %d is below the leader's log start %d; starting over there", tp[0], tp[1],
                        part.log.log_end_offset, res.log_start_offset)
            part.log.truncate_fully_and_start_at(res.log_start_offset)
            return
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            st.truncated = False  # diverged: truncate by leader epoch again
        log.info("%s-%d: fetch from leader %d answered %s", tp[0], tp[1], self.leader, name)
        st.backoff_until = now + self.manager.settings.backoff_ms / 1000.0


def _whole_batches(records: memoryview | bytes) -> bytes:
    """The complete batches at the front of ``records`` (a leader may cut the last one short)."""
    mv = memoryview(records)
    pos = 0
    n = len(mv)
    while pos + BATCH_HEADER_SIZE <= n:
        size = read_header(mv, pos).size
        if pos + size > n:
            break
        pos += size
    return bytes(mv[:pos])
