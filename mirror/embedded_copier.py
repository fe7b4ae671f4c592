"""PartitionCopier: the leader of one offline partition pulling its live partition (the embedded mirror).

The paper's offline cluster "runs a set of embedded consumers that pull data from the Kafka instances in the
live datacenters": here the broker that leads an offline partition fetches the live partition itself
(read_committed, up to the live last stable offset), checks and re-stamps the batches with the standalone
mirror's walk (batch_rewrite.forward_batches: CRC-32C of every batch, control batches and aborted
transactions passed over, keys/values/headers/timestamps/codec unchanged) and appends them to its own log as
leader; ordinary replication carries them to the followers (ISR, min.insync.replicas, high watermark).

**Where the copy ends is in the offline log itself.** Every copied batch carries the link's producer id, and
its producer epoch and base sequence spell the live base offset it was copied from
(batch_rewrite.source_position). The partition's producer state, rebuilt from the log on every replica and
replicated with it, therefore names the last live batch copied: a new leader (after a kill -9, a leadership
move, a restart) resumes right after it, with no gap and no duplicate, whatever the old leader had appended
beyond what the new one has (the followers truncate to the new leader's log). When the producer state no
longer knows the link's producer (``producer.id.expiration.ms`` without a copied batch), the log is scanned
for the link's last batch instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ferry.broker.log.log import Log
from ferry.broker.server.log_flusher import LogFlusher
from ferry.broker.server.partition import Partition
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.task_cancel import cancel_and_wait
from ferry.mirror.batch_rewrite import CorruptBatchError, copy_positions, live_offset_of
from ferry.mirror.link_progress import COPYING, FAILED, WAITING
from ferry.mirror.partition_mirror import backoff
from ferry.wire.async_broker_connection import AsyncBrokerConnection
from ferry.wire.connection_errors import BrokerUnavailableError
from ferry.wire.protocol import fetch, list_offsets
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.record.errors import KafkaStorageError, RecordTooLargeError
from ferry.wire.record.read_committed import ReadCommitted
from ferry.wire.record.record_batch import BATCH_HEADER_SIZE, RecordBatchHeader, read_header
from ferry.wire.sasl_login import PLAINTEXT, AuthenticationError, ClientSecurity

log = logging.getLogger("ferry.mirror.embedded")

FETCH_MAX_BYTES = 8 << 20  # per live partition and fetch
FETCH_WAIT_MS = 500  # long poll when the live partition has nothing new
FETCH_TIMEOUT_S = 30.0
SCAN_CHUNK_BYTES = 4 << 20
RECEIVE_BUFFER_BYTES = 4 << 20  # SO_RCVBUF of the live connections (the kernel caps it at net.core.rmem_max)

# what the live cluster answers when the link's user may not read: the link's settings must change, not the live side
REFUSED = frozenset({ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED})


class LinkSettingsError(Exception):
    """The link's settings cannot reach the live cluster (no listener of its security.protocol, a refused
    login or read): the link is failed until they change; one line, never a secret."""


LeaderLookup = Callable[[str, int], "asyncio.Future[tuple[int, str, int] | None]"]


def copy_position(lg: Log, producer_id: int) -> int | None:
    """The live offset after the last batch the link copied into ``lg``, or None (nothing copied yet).

    From the producer state (rebuilt from the log on every replica) when it knows the link's producer, else by
    scanning the log for the link's last batch (the state expired it). Blocking: run it off the event loop."""
    entry = lg.producer_state.producers.get(producer_id)
    if entry is not None and entry.batches:
        b = entry.batches[-1]
        return live_offset_of(entry.epoch, b.first_seq) + (b.last_offset - b.first_offset) + 1
    position = None
    for h, _batch in link_batches(lg, producer_id, lg.log_start_offset, lg.log_end_offset):
        position = live_offset_of(h.producer_epoch, h.base_sequence) + h.last_offset_delta + 1
    return position


def link_batches(lg: Log, producer_id: int, start: int, end: int) -> Iterator[tuple[RecordBatchHeader, memoryview]]:
    """The link's data batches in ``lg`` between offsets ``start`` and ``end`` (batch boundaries), read from the
    files in chunks. Blocking: run it off the event loop."""
    offset = max(start, lg.log_start_offset)
    while offset < end:
        chunk = lg.read(offset, SCAN_CHUNK_BYTES, upper_bound=end)
        if chunk is None:
            return
        data = memoryview(chunk.read_bytes())
        pos = 0
        while len(data) - pos >= BATCH_HEADER_SIZE:
            h = read_header(data, pos)
            if pos + h.size > len(data):
                break
            if h.producer_id == producer_id and not h.is_control and h.base_offset >= start:
                yield h, data[pos:pos + h.size]
            offset = h.next_offset
            pos += h.size
        if pos == 0:
            return  # a batch larger than the chunk: cannot happen below message.max.bytes; stop rather than spin


@dataclass
class CopyProgress:
    """What the copier last saw and did (reported to ZooKeeper by the link, shown by `describe`)."""

    live_end: int = -1  # the live last stable offset at the last fetch
    copied_to: int = -1  # the live offset the copy reached (the next to fetch)
    state: str = WAITING
    error: str | None = None
    messages: int = 0  # records appended by this copier
    bytes: int = 0  # record batch bytes appended by this copier
    data_lost: int = 0  # live offsets deleted by live retention before they were copied


class PartitionCopier:
    """One offline partition led here, pulling one live partition of one link (one asyncio task)."""

    def __init__(self, link_name: str, producer_id: int, part: Partition, replicas: ReplicaManager,
                 leader_of: LeaderLookup, run_blocking: Callable, client_id: str,
                 security: ClientSecurity = PLAINTEXT, flusher: LogFlusher | None = None) -> None:
        self.link_name = link_name
        self.producer_id = producer_id
        self.part = part
        self.replicas = replicas
        self.leader_of = leader_of  # (topic, partition) -> (node id, host, port) of the live leader, or None
        self.run_blocking = run_blocking  # loop.run_in_executor(executor, fn, *args)
        self.client_id = client_id
        self.security = security  # the link's --source-config: TLS and SASL towards the live brokers
        self.flusher = flusher  # the broker's group commit: a caught-up copy is flushed as an acks=all produce is
        self._flushing: set[asyncio.Task] = set()  # flushes asked for and not yet done
        self.link_error: str | None = None  # why the link's settings fail here (LinkSettingsError), if they do
        self.epoch = part.leader_epoch
        self.progress = CopyProgress()
        self._conn: AsyncBrokerConnection | None = None
        # the next fetch, sent before this round's append: (live offset it asks for, its task)
        self._ahead: tuple[int, asyncio.Task] | None = None
        self._task: asyncio.Task | None = None
        self._fresh = False
        # the offline log end when the copy began with nothing of the link's in the log: its batches all come
        # after it, so the audit counts from there rather than reading the whole offline log once
        self.fresh_from: int | None = None

    @property
    def topic(self) -> str:
        return self.part.topic

    @property
    def partition(self) -> int:
        return self.part.partition

    @property
    def leads(self) -> bool:
        """Still the leader of the epoch this copier started in (else a new copier takes over)."""
        part = self.part
        return part.is_leader and part.leader_epoch == self.epoch and not part.log.offline

    def start(self) -> PartitionCopier:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"mirror-{self.topic}-{self.partition}")
        return self

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    async def stop(self) -> None:
        task, self._task = self._task, None
        ahead, self._ahead = self._ahead, None
        await cancel_and_wait([task, *self._flushing] + ([ahead[1]] if ahead is not None else []))
        self._close()

    def _close(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:  # its answer would come on a connection closed now: never used
            ahead[1].cancel()
            ahead[1].add_done_callback(_retrieve)
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    async def _run(self) -> None:
        tp = f"{self.topic}-{self.partition}"
        position, end = await self.run_blocking(_position_and_end, self.part.log, self.producer_id)
        self.fresh_from = end if position is None else None
        log.info("mirror link %s: %s: leader (epoch %d) copies from %s", self.link_name, tp, self.epoch,
                 f"live offset {position}" if position is not None else "the live log start")
        self.progress.copied_to = position if position is not None else -1
        self._fresh = position is None  # nothing copied yet: the live log start is where the copy begins
        failures = 0
        while self.leads:
            if not self.part.enough_replicas():
                self._set_state(WAITING, f"ISR {list(self.part.isr)} below min.insync.replicas {self.part.min_isr}")
                await asyncio.sleep(0.5)
                continue
            try:
                position = await self._round(position if position is not None else 0)
                failures = 0
                self.link_error = None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # every failure is retried: the live side down, moved, cut off
                failures += 1
                self._close()
                if isinstance(e, AuthenticationError):
                    e = LinkSettingsError(f"the live cluster refused the link's login: {e}")
                reason = " ".join((str(e) or type(e).__name__).split())
                self.link_error = reason if isinstance(e, LinkSettingsError) else None
                self._set_state(FAILED if isinstance(e, CorruptBatchError | RecordTooLargeError | LinkSettingsError)
                                else WAITING, reason)
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("mirror link %s: %s: %s (%d times in a row; retrying)", self.link_name, tp,
                                self.progress.error, failures)
                await asyncio.sleep(backoff(failures))
        log.info("mirror link %s: %s: no longer the leader of epoch %d; copy stopped at live offset %s",
                 self.link_name, tp, self.epoch, position)

    def _set_state(self, state: str, error: str | None = None) -> None:
        self.progress.state, self.progress.error = state, error

    async def _connection(self) -> AsyncBrokerConnection:
        if self._conn is None:
            leader = await self.leader_of(self.topic, self.partition)
            if leader is None:
                raise BrokerUnavailableError(f"live {self.topic}-{self.partition} has no leader")
            node, host, port = leader
            # a window of a few MiB from the first answer on (as MessageSetConsumer's): on a busy machine each
            # refill of a small socket buffer waits for both brokers to get a CPU
            self._conn = AsyncBrokerConnection(node, host, port, self.client_id, security=self.security,
                                               receive_buffer_bytes=RECEIVE_BUFFER_BYTES)
        return self._conn

    async def _fetch(self, position: int) -> fetch.PartitionFetchResult:
        """One read_committed Fetch of the live partition from ``position``: its answer for the partition."""
        conn = await self._connection()
        request = fetch.encode_request([(self.topic, [fetch.FetchPartition(self.partition, position, FETCH_MAX_BYTES)])],
                                       FETCH_WAIT_MS, 1, FETCH_MAX_BYTES, isolation_level=fetch.READ_COMMITTED)
        body = await conn.request(*request, FETCH_TIMEOUT_S)
        results = fetch.parse_response(body).topics.get(self.topic) or []
        res = next((r for r in results if r.partition == self.partition), None)
        if res is None:
            raise BrokerUnavailableError(f"live answer without {self.topic}-{self.partition}")
        return res

    async def _round(self, position: int) -> int:
        """One fetch's answer from the live leader and the append of what it brought; the live offset to fetch
        next. The next fetch goes out before the append (one fetch ahead per partition, so the live broker reads
        and sends while this broker appends): its answer is used only if the copy did reach the offset it asks
        for, else it is dropped with its connection (order and exactly-once stay the log's)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == position:
            res = await ahead[1]
        else:
            if ahead is not None:
                self._ahead = ahead
                self._close()
            res = await self._fetch(position)
        if res.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            return await self._out_of_range(position)
        if res.error_code in REFUSED:
            raise LinkSettingsError(f"live {self.topic}-{self.partition}: {ErrorCode(res.error_code).name}")
        if res.error_code:
            self._close()  # the leader moved (or the topic is not there yet): look it up again
            raise BrokerUnavailableError(f"live {self.topic}-{self.partition}: {ErrorCode(res.error_code).name}")
        self.progress.live_end = res.last_stable_offset
        records = res.records
        if records is None or len(records) < BATCH_HEADER_SIZE:
            self._set_state(COPYING)
            self.progress.copied_to = position
            return position
        stamped, messages, next_offset = copy_positions(records, position, self.producer_id,
                                                        ReadCommitted(res.aborted_transactions))
        if next_offset > position and self.leads:
            self._ahead = (next_offset, asyncio.get_running_loop().create_task(self._fetch(next_offset)))
        if stamped:
            if not self.leads:  # the fetch was out while leadership moved: the new leader copies it
                return position
            try:
                # the walk checked each live batch's CRC-32C and computed the re-stamped one's: not a third pass
                info = self.replicas.append(self.part, stamped, check_sequences=False, crcs_fresh=True)
            except KafkaStorageError:
                return position  # the log dir went offline: leadership moves (log_dir_failure.py)
            if next_offset >= res.last_stable_offset:
                self._flush_to(info.last_offset + 1)
            self.progress.messages += messages
            self.progress.bytes += len(stamped)
            self._fresh = False
        self._set_state(COPYING)
        self.progress.copied_to = next_offset
        return next_offset

    def _flush_to(self, end: int) -> None:
        """The copy reached the live end: flush now, as an acks=all produce would, rather than at the next
        log.flush.interval.ms, since consumers of a default broker see only flushed messages (the standalone
        mirror's acks=all produces flush the same way). A backlog's answers are flushed by the message count
        rule instead. The broker's LogFlusher joins concurrent flushes of one log (group commit); not awaited:
        the next fetch need not wait for the disk."""
        log_ = self.part.log
        if self.flusher is None or log_.offsets.see_unflushed or log_.flushed_offset >= end:
            return
        flushing = asyncio.get_running_loop().create_task(self.flusher.flushed_to(log_, end))
        self._flushing.add(flushing)
        flushing.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task) -> None:
        self._flushing.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the periodic flush is left to try again
            log.warning("mirror link %s: %s-%d: flush failed: %s", self.link_name, self.topic, self.partition,
                        task.exception())

    async def _out_of_range(self, position: int) -> int:
        """The live log no longer (or not yet) has ``position``: ask where it starts and ends."""
        start = await self._list_offset(fetch_earliest=True)
        end = await self._list_offset(fetch_earliest=False)
        if self._fresh:
            log.info("mirror link %s: %s-%d: the live log starts at %d", self.link_name, self.topic, self.partition,
                     start)
            return start
        if position < start:
            lost = start - position
            self.progress.data_lost += lost
            log.error("mirror link %s: %s-%d: DATA LOST: live offsets [%d, %d) were deleted by live retention "
                      "before they were copied (%d offsets); copying goes on from %d", self.link_name, self.topic,
                      self.partition, position, start, lost, start)
            return start
        log.error("mirror link %s: %s-%d: live offset %d is beyond the live end %d (the live topic was re-created?);"
                  " copying goes on from the live log start %d", self.link_name, self.topic, self.partition,
                  position, end, start)
        return start

    async def _list_offset(self, fetch_earliest: bool) -> int:
        assert self._conn is not None
        ts = list_offsets.EARLIEST_TIMESTAMP if fetch_earliest else list_offsets.LATEST_TIMESTAMP
        body = await self._conn.request(*list_offsets.encode_request([(self.topic, [(self.partition, ts)])],
                                                                     read_committed=True), FETCH_TIMEOUT_S)
        res = next((r for r in list_offsets.parse_response(body).get(self.topic, []) if r.partition == self.partition),
                   None)
        if res is not None and res.error_code in REFUSED:
            raise LinkSettingsError(f"live {self.topic}-{self.partition}: ListOffsets {ErrorCode(res.error_code).name}")
        if res is None or res.error_code:
            self._close()
            raise BrokerUnavailableError(f"live {self.topic}-{self.partition}: ListOffsets "
                                         f"{ErrorCode(res.error_code).name if res else 'answered nothing'}")
        return res.offset

    def report(self, broker_id: int) -> dict:
        p = self.progress
        return {"link": self.link_name, "topic": self.topic, "partition": self.partition, "broker": broker_id,
                "leader_epoch": self.epoch, "live_end": p.live_end, "copied_to": p.copied_to,
                "offline_end": self.part.log.log_end_offset, "state": p.state, "error": p.error,
                "messages": p.messages, "bytes": p.bytes, "data_lost": p.data_lost, "updated_ms": int(time.time() * 1000)}


def _position_and_end(lg: Log, producer_id: int) -> tuple[int | None, int]:
    """copy_position and the log end after it (blocking)."""
    position = copy_position(lg, producer_id)
    return position, lg.log_end_offset


def _retrieve(task: asyncio.Task) -> None:
    """A dropped fetch ahead's outcome, taken so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()
