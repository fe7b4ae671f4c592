"""MirrorStream: one worker thread moving its share of the owned partitions from live to offline.

Each round it
1. sends one Fetch per live leader (all its partitions whose pipeline has room),
2. sends Produce requests per offline leader: request j carries the j-th unacknowledged batch of each
   partition (one batch per partition per request, at most MAX_IN_FLIGHT per partition, answered in
   order), so the offline broker's idempotence check sees exactly one batch and dedupes a retry exactly,
3. reads the produce answers (acknowledged batches are counted for audit and become committable; a
   coalesced batch refused as too large is dropped with everything after it and re-fetched, coalesced
   smaller: see `_split_refused`),
4. reads the fetch answers and rewrites their batches into the pipeline (`batch_rewrite`; runs of small
   batches are coalesced, since only MAX_IN_FLIGHT batches per partition can be in flight).

Fetching overlaps producing; a partition without work long-polls the live broker. Every failure
(connection refused or cut, leader moved, unknown partition, refused sequence) puts the partition in
exponential back-off and leaves its unacknowledged batches in place, byte-identical, for the next try:
nothing is ever skipped. Ownership changes arrive as commands between rounds.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from ferry.client.wire_client import WireClient
from ferry.mirror.audit_tally import CountFn
from ferry.mirror.batch_rewrite import next_sequence
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_limits import (
    COALESCE_BYTES,
    FETCH_WAIT_MS,
    MAX_IN_FLIGHT,
    MAX_STREAM_PENDING_BYTES,
    log,
)
from ferry.mirror.partition_mirror import (
    PartitionMirror,
    PendingBatch,
    TopicPartition,
)
from ferry.mirror.stream_fetching import MirrorFetching
from ferry.mirror.stream_producing import MirrorProducing
from ferry.mirror.stream_session import MirrorSession


class MirrorStream(MirrorFetching, MirrorProducing, MirrorSession, threading.Thread):
    """A worker thread; partitions are handed to it with `assign` and taken back with `revoke`."""

    def __init__(self, index: int, source: WireClient, target: WireClient, count: CountFn,
                 metrics: MirrorMetrics, fetch_wait_ms: int = FETCH_WAIT_MS,
                 coalesce_bytes: int = COALESCE_BYTES) -> None:
        super().__init__(name=f"ferry-mirror-stream-{index}", daemon=True)
        self.index = index
        self.source = source
        self.target = target
        self.count = count
        self.metrics = metrics
        self.fetch_wait_ms = fetch_wait_ms
        self.coalesce_bytes = coalesce_bytes
        # partition -> a lower coalesce limit, learnt from the offline broker refusing a coalesced batch
        self.coalesce_limits: dict[TopicPartition, int] = {}
        self.partitions: dict[TopicPartition, PartitionMirror] = {}
        self.sequences: dict[TopicPartition, int] = {}  # next sequence per partition for our producer id
        # partition -> the batches that were unacknowledged (possibly sent) when it was revoked, kept as
        # bytes so that a partition coming back at their offset resends exactly them
        self._rewind: dict[TopicPartition, list[PendingBatch]] = {}
        self.producer_id: int | None = None
        self.producer_epoch = 0
        self._pid_retry_at = 0.0
        self._pid_failures = 0
        self._needs_new_pid = False
        self._source_stale = True
        self._target_stale = True
        self._source_refreshed = self._target_refreshed = 0.0  # earliest next refresh (monotonic)
        self._source_md_failures = self._target_md_failures = 0
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._committable: dict[TopicPartition, int] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}
        self.rounds = 0

    # ------------------------------------------------------------------ control (other threads)
    def assign(self, offsets: dict[TopicPartition, int | None]) -> None:
        """Start mirroring these partitions from these offsets (None = the live log start)."""
        if offsets:
            self._commands.put(("assign", dict(offsets), None))

    def revoke(self, partitions: set[TopicPartition], timeout: float = 120.0) -> dict[TopicPartition, int]:
        """Stop mirroring ``partitions`` and return their committable offsets (acknowledged prefix).

        Blocks until the worker finished its current round, so nothing for them is in flight when the
        caller commits and releases ownership.
        """
        if not partitions:
            return {}
        if not self.is_alive():
            return self._take(partitions)
        fut: Future = Future()
        self._commands.put(("revoke", set(partitions), fut))
        return fut.result(timeout)

    def committable(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._committable)

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
        times = [min(p.fetch_retry_at, p.produce_retry_at) for p in self.partitions.values()]
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
                        self.partitions[tp] = PartitionMirror(tp[0], tp[1], offset)
                        self._maybe_rewind(self.partitions[tp])
                self._source_stale = self._target_stale = True
                self._publish_offsets()
            elif kind == "revoke":
                try:
                    fut.set_result(self._take(arg))
                except Exception as e:  # pragma: no cover - _take does not raise
                    fut.set_exception(e)

    def _take(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        out = {}
        for tp in partitions:
            pm = self.partitions.pop(tp, None)
            if pm is None:
                continue
            off = pm.commit_offset()
            if off is not None:
                out[tp] = off
            unacked = pm.unacked(MAX_IN_FLIGHT)  # only these can have been sent
            if unacked:
                self._rewind[tp] = [PendingBatch(bytearray(b.view()), 0, b.size, b.header, b.resume_offset,
                                                 b.sequence, uncertain=True, end_offset=b.end_offset,
                                                 coalesced=b.coalesced)
                                    for b in unacked]
                self._trim_rewind()
        with self._lock:
            for tp in partitions:
                self._committable.pop(tp, None)
                self._high_watermarks.pop(tp, None)
        return out

    def _maybe_rewind(self, pm: PartitionMirror) -> None:
        """Sequences are never reused for other bytes under one producer id (the broker would take a
        different batch with a cached sequence range for a retry and drop it). The one exception: a
        partition that comes back at exactly the offset of its first unacknowledged batch resends the
        very batches it held (kept as bytes: a fresh fetch could coalesce differently) under their
        sequences, one per request, and the broker dedupes them exactly; fetching goes on after them.
        Otherwise the sequence moves on; the gap makes the broker refuse it and we take a new producer id.
        """
        kept = self._rewind.pop(pm.tp, None)
        if not kept or pm.fetch_offset != kept[0].resume_offset:
            return
        for b in kept:
            pm.add_pending(b)
        last = kept[-1]
        pm.fetch_offset = last.end_offset
        self.sequences[pm.tp] = next_sequence(last.sequence, last.header)

    def _trim_rewind(self) -> None:
        """Bound the bytes kept for revoked partitions (dropping one only costs a new producer id later)."""
        total = sum(b.size for kept in self._rewind.values() for b in kept)
        for tp in list(self._rewind):
            if total <= MAX_STREAM_PENDING_BYTES:
                break
            total -= sum(b.size for b in self._rewind.pop(tp))

    def _publish_offsets(self) -> None:
        with self._lock:
            for tp, pm in self.partitions.items():
                off = pm.commit_offset()
                if off is not None:
                    self._committable[tp] = off
                if pm.high_watermark >= 0:
                    self._high_watermarks[tp] = pm.high_watermark

    # ------------------------------------------------------------------ one round
    def _round(self) -> bool:
        now = time.monotonic()
        if not self._ensure_producer_id(now):
            return False
        if self._needs_new_pid and now >= self._pid_retry_at:
            self._reset_producer_id()
        self._refresh_metadata(now)
        fetch_plan = self._plan_fetches(now)
        produce_plan = self._plan_produces(now)
        if not fetch_plan and not produce_plan:
            return False
        wait_ms = 0 if produce_plan else self._fetch_wait(now)
        fetches = self._send_fetches(fetch_plan, wait_ms)
        produces = self._send_produces(produce_plan)
        self._receive_produces(produces)
        self._receive_fetches(fetches)
        self._publish_offsets()
        if self._needs_new_pid:
            self._reset_producer_id()
        return True






















def stream_for(tp: TopicPartition, streams: int) -> int:
    """Which stream mirrors a partition: stable across rebalances, spreading one topic's partitions."""
    topic, partition = tp
    h = 0
    for ch in topic.encode():
        h = (h * 31 + ch) & 0x7FFFFFFF
    return (h + partition) % streams


StreamFactory = Callable[[int], MirrorStream]
