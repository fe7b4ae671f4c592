"""MirrorStream: one worker thread moving its share of the owned partitions from live to offline.

A partition handed to the stream is first *synced*: its checkpoint and the offline log's tail say exactly
which live offset the offline cluster has everything before, and which sequence comes next (tail_sync.py).
Then each round it
1. sends one Fetch per live leader (all its partitions whose pipeline has room),
2. sends Produce requests per offline leader: request j carries the j-th unacknowledged batch of each
   partition (one batch per partition per request, at most MAX_IN_FLIGHT per partition, answered in
   order), so the offline broker's sequence check judges each batch alone: a retry is deduplicated
   exactly, and a batch another mirror wrote first is refused rather than swallowed with others,
3. reads the produce answers (acknowledged batches are counted for audit and become committable; a
   coalesced batch refused as too large is dropped with everything after it and re-fetched, coalesced
   smaller: see `_split_refused`; a refused sequence means someone else wrote: the partition syncs again),
4. reads the fetch answers and rewrites their batches into the pipeline (`batch_rewrite`; runs of small
   batches are coalesced, since only MAX_IN_FLIGHT batches per partition can be in flight).

Fetching overlaps producing; a partition without work long-polls the live broker. Every failure
(connection refused or cut, leader moved, unknown partition) puts the partition in exponential back-off
and leaves its unacknowledged batches in place, byte-identical, for the next try: nothing is ever skipped.
Ownership changes arrive as commands between rounds.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from ferry.client.wire_client import WireClient
from ferry.mirror.checkpoint import CheckpointConflict, CheckpointStore, MemoryCheckpoints, write_one
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_limits import (
    COALESCE_BYTES,
    FETCH_WAIT_MS,
    IN_FLIGHT_FETCH_WAIT_MS,
    MAX_IN_FLIGHT,
    log,
)
from ferry.mirror.partition_mirror import SYNC_FULL, SYNCED, PartitionMirror, Progress, TopicPartition
from ferry.mirror.stream_fetching import MirrorFetching
from ferry.mirror.stream_producing import MirrorProducing
from ferry.mirror.stream_session import MirrorSession
from ferry.mirror.tail_sync import SyncResult

Adopt = Callable[[TopicPartition, SyncResult, int, int, bool], bool]  # CheckpointKeeper.adopt


class MirrorStream(MirrorFetching, MirrorProducing, MirrorSession, threading.Thread):
    """A worker thread; partitions are handed to it with `assign` and taken back with `revoke`.

    ``checkpoints`` is where partitions' checkpoints live (default: this process's memory), ``adopt`` what
    takes over a partition's books after a sync (default: store the sync's new anchor, if any); ``audit``:
    count the acknowledged records per bucket for the mirror tier.
    """

    def __init__(self, index: int, source: WireClient, target: WireClient, metrics: MirrorMetrics,
                 fetch_wait_ms: int = FETCH_WAIT_MS, coalesce_bytes: int = COALESCE_BYTES, *,
                 checkpoints: CheckpointStore | None = None, adopt: Adopt | None = None, audit: bool = True,
                 max_in_flight: int = MAX_IN_FLIGHT) -> None:
        super().__init__(name=f"ferry-mirror-stream-{index}", daemon=True)
        self.index = index
        self.source = source
        self.target = target
        self.metrics = metrics
        self.fetch_wait_ms = fetch_wait_ms
        self.coalesce_bytes = coalesce_bytes
        self.checkpoints: CheckpointStore = checkpoints if checkpoints is not None else MemoryCheckpoints()
        self.adopt: Adopt = adopt if adopt is not None else self._store_anchor
        self.audit = audit
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"max_in_flight must be 1..{MAX_IN_FLIGHT} (the offline broker dedupes that many)")
        self.max_in_flight = max_in_flight  # batches per partition in flight, over as many rounds as it takes
        # live node -> the buffer its fetch answers are received into (forward_batches copies what it keeps)
        self._fetch_buffers: dict[int, bytearray] = {}
        self._produces: dict = {}  # offline node -> deque of (connection, request, round) in flight, oldest first
        self.max_rounds_in_flight = 0  # the deepest the pipeline got (tests, bench)
        self.overlapped_rounds = 0  # rounds that fetched while earlier rounds' produce answers were due
        # partition -> a lower coalesce limit, learnt from the offline broker refusing a coalesced batch
        self.coalesce_limits: dict[TopicPartition, int] = {}
        self.partitions: dict[TopicPartition, PartitionMirror] = {}
        self.sequences: dict[TopicPartition, int] = {}  # next sequence per partition for fetched batches
        self.producer_id: int | None = None  # the mirror group's (checkpoint.py), the same in every stream
        self.producer_epoch = 0
        self._pid_retry_at = 0.0
        self._pid_failures = 0
        self._source_stale = True
        self._target_stale = True
        self._source_refreshed = self._target_refreshed = 0.0  # earliest next refresh (monotonic)
        self._source_md_failures = self._target_md_failures = 0
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._progress: dict[TopicPartition, Progress] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}
        self.rounds = 0

    # ------------------------------------------------------------------ control (other threads)
    def assign(self, offsets: dict[TopicPartition, int | None]) -> None:
        """Start mirroring these partitions. Where from is decided by a sync against the offline log
        (tail_sync.py); the offset given is used only for a partition without any checkpoint or committed
        offset (None: the live log start)."""
        if offsets:
            self._commands.put(("assign", dict(offsets), None))

    def revoke(self, partitions: set[TopicPartition], timeout: float = 120.0) -> dict[TopicPartition, Progress]:
        """Stop mirroring ``partitions`` and return their progress (acknowledged prefix, counts not yet taken).

        Blocks until the worker finished its current round, so nothing for them is in flight when the
        caller checkpoints and releases ownership.
        """
        if not partitions:
            return {}
        if not self.is_alive():
            return self._take(partitions)
        fut: Future = Future()
        self._commands.put(("revoke", set(partitions), fut))
        return fut.result(timeout)

    def resync(self, partitions: set[TopicPartition]) -> None:
        """Sync these partitions again from their stored checkpoint (another process wrote it)."""
        if partitions:
            self._commands.put(("resync", set(partitions), None))

    def take_progress(self) -> dict[TopicPartition, Progress]:
        """Progress of the synced partitions since the last call (their counts are handed over once)."""
        with self._lock:
            out = self._progress
            self._progress = {tp: Progress(p.live, p.offline, p.seq, p.generation) for tp, p in out.items()}
            return out

    def committable(self) -> dict[TopicPartition, int]:
        """The live offset copied up to, per synced partition."""
        with self._lock:
            return {tp: p.live for tp, p in self._progress.items()}

    def high_watermarks(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._high_watermarks)

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    # ------------------------------------------------------------------ thread
    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._apply_commands()
                if not self.partitions:
                    self._wait_for_command(0.5)
                    continue
                try:
                    did_work = self._round()
                except Exception:  # a bug must not silently end the stream: log, back off, go on
                    log.exception("mirror stream %d: unexpected error in a round", self.index)
                    self.metrics.error("internal")
                    did_work = False
                self.rounds += 1
                if not did_work:
                    self._wait_for_command(self._idle_wait())
        finally:
            self._apply_commands()
            self.source.close()
            self.target.close()

    def _wait_for_command(self, seconds: float) -> None:
        try:
            cmd = self._commands.get(timeout=max(seconds, 0.001))
        except queue.Empty:
            return
        self._commands.put(cmd)  # handled in order at the top of the loop

    def _idle_wait(self) -> float:
        now = time.monotonic()
        times = [min(p.fetch_retry_at, p.produce_retry_at) if p.sync == SYNCED else p.sync_retry_at
                 for p in self.partitions.values()]
        times.append(self._pid_retry_at)
        nxt = min((t for t in times if t > now), default=now + 0.05)
        return min(max(nxt - now, 0.005), 0.5)

    def _apply_commands(self) -> None:
        while True:
            try:
                kind, arg, fut = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "assign":
                for tp, offset in arg.items():
                    if tp not in self.partitions:
                        self.partitions[tp] = PartitionMirror(tp[0], tp[1], None, assigned=offset)
                self._source_stale = self._target_stale = True
            elif kind == "resync":
                for tp in arg:
                    pm = self.partitions.get(tp)
                    if pm is not None:
                        pm.sync, pm.sync_retry_at = SYNC_FULL, 0.0
                        with self._lock:
                            self._progress.pop(tp, None)
            elif kind == "revoke":
                try:
                    fut.set_result(self._take(arg))
                except Exception as e:  # pragma: no cover - _take does not raise
                    fut.set_exception(e)

    def _take(self, partitions: set[TopicPartition]) -> dict[TopicPartition, Progress]:
        if threading.current_thread() is self or not self.is_alive():
            self._drain_produces()  # nothing of theirs in flight once the caller checkpoints and releases
        self._publish_progress()
        with self._lock:
            out = {tp: self._progress.pop(tp) for tp in partitions if tp in self._progress}
            for tp in partitions:
                self._high_watermarks.pop(tp, None)
        for tp in partitions:
            self.partitions.pop(tp, None)
        if not self.partitions:
            self._fetch_buffers.clear()  # an idle stream holds no fetch buffers
        return out

    def _publish_progress(self) -> None:
        """Hand what the offline cluster acknowledged to the committer's side (take_progress)."""
        with self._lock:
            for tp, pm in self.partitions.items():
                if pm.sync != SYNCED and pm.generation == 0:
                    continue  # never synced: nothing of ours to report
                off = pm.commit_offset()
                p = self._progress.get(tp)
                if p is None or p.generation != pm.generation:
                    p = self._progress[tp] = Progress(off if off is not None else pm.acked_live, pm.acked_offline,
                                                      pm.acked_seq, pm.generation)
                if pm.sync == SYNCED and off is not None:
                    p.live = off
                p.offline, p.seq = pm.acked_offline, pm.acked_seq
                if pm.counts:
                    p.counts.update(pm.counts)
                    pm.counts.clear()
                if pm.high_watermark >= 0:
                    self._high_watermarks[tp] = pm.high_watermark

    def _store_anchor(self, tp: TopicPartition, result: SyncResult, version: int, _generation: int,
                      _count: bool) -> bool:
        """``adopt`` without a CheckpointKeeper: store a new anchor before copying from it."""
        if result.write:
            try:
                write_one(self.checkpoints, tp, result.anchor, version)
            except CheckpointConflict:
                return False
        return True

    # ------------------------------------------------------------------ one round
    def _round(self) -> bool:
        """Fetch, send what is new, read what was answered: produce requests stay in flight across rounds
        (up to ``max_in_flight`` batches per partition, in order), so the next fetch does not wait for the
        offline cluster's acks=all. Only a sync, a metadata refresh of the offline side or a revoke waits
        for every answer first."""
        now = time.monotonic()
        if not self._ensure_producer_id(now):
            return False
        if self._produces and (self._target_stale and now >= self._target_refreshed or any(
                pm.sync != SYNCED and pm.sync_retry_at <= now for pm in self.partitions.values())):
            self._drain_produces()
        self._refresh_metadata(now)
        self._sync_partitions(now)
        fetch_plan = self._plan_fetches(now)
        produce_plan = self._plan_produces(now)
        if not fetch_plan and not produce_plan and not self._produces:
            return False
        wait_ms = 0 if produce_plan else self._fetch_wait(now)
        if self._produces:
            wait_ms = min(wait_ms, IN_FLIGHT_FETCH_WAIT_MS)  # answers are read between fetches
        fetches = self._send_fetches(fetch_plan, wait_ms)
        if fetches and self._produces:
            self.overlapped_rounds += 1
            self.metrics.overlapped_rounds.inc()
        self._send_produces(produce_plan)
        depth = self._rounds_in_flight()
        self.max_rounds_in_flight = max(self.max_rounds_in_flight, depth)
        self.metrics.rounds_in_flight.labels(str(self.index)).set(depth)
        self._receive_produces(block=not fetches)
        self._receive_fetches(fetches)
        self._receive_produces(block=False)
        self._publish_progress()
        return True


def stream_for(tp: TopicPartition, streams: int) -> int:
    """Which stream mirrors a partition: stable across rebalances, spreading one topic's partitions."""
    topic, partition = tp
    h = 0
    for ch in topic.encode():
        h = (h * 31 + ch) & 0x7FFFFFFF
    return (h + partition) % streams


StreamFactory = Callable[[int], MirrorStream]
