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
   smaller: see `StreamProducer._split_refused`; a refused sequence means someone else wrote: the partition syncs again),
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

from ferry.client.audit.event import AUDIT_TOPIC
from ferry.client.wire_client import WireClient
from ferry.mirror.checkpoint import CheckpointStore, MemoryCheckpoints
from ferry.mirror.cluster_view import ClusterView
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_limits import (
    COALESCE_BYTES,
    FETCH_WAIT_MS,
    IN_FLIGHT_FETCH_WAIT_MS,
    MAX_IN_FLIGHT,
    log,
)
from ferry.mirror.partition_mirror import (
    SYNC_FULL,
    SYNCED,
    PartitionMirror,
    PartitionProgress,
    TopicPartition,
)
from ferry.mirror.stream_fetching import StreamFetcher
from ferry.mirror.stream_producing import StreamProducer
from ferry.mirror.stream_progress import StreamProgress
from ferry.mirror.stream_session import Adopt, StreamSession


class MirrorStream:
    """A worker thread; partitions are handed to it with `assign` and taken back with `revoke`.

    A coordinator: the thread runs rounds over its collaborators, which own their state: ``session`` (the
    producer id, the syncs), ``fetcher`` (live side), ``producer`` (offline side), ``progress`` (the
    hand-over to the committer), one ClusterView per cluster (metadata refreshes). They share the table of
    owned partitions, which only this thread changes (ownership changes arrive as commands between rounds).

    ``checkpoints`` is where partitions' checkpoints live (default: this process's memory), ``adopt`` what
    takes over a partition's books after a sync (default: store the sync's new anchor, if any); ``audit``:
    count the acknowledged records per bucket for the mirror tier.
    """

    def __init__(self, index: int, source: WireClient, target: WireClient, metrics: MirrorMetrics,
                 fetch_wait_ms: int = FETCH_WAIT_MS, coalesce_bytes: int = COALESCE_BYTES, *,
                 checkpoints: CheckpointStore | None = None, adopt: Adopt | None = None, audit: bool = True,
                 max_in_flight: int = MAX_IN_FLIGHT) -> None:
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"max_in_flight must be 1..{MAX_IN_FLIGHT} (the offline broker dedupes that many)")
        self.partitions: dict[TopicPartition, PartitionMirror] = {}
        self.index = index
        self.source = source
        self.target = target
        self.metrics = metrics
        self.audit = audit
        self.source_view = ClusterView(source, "live", index, metrics)
        self.target_view = ClusterView(target, "offline", index, metrics)
        self.session = StreamSession(index, source, target, metrics,
                                     checkpoints if checkpoints is not None else MemoryCheckpoints(), adopt,
                                     self.partitions)
        self.fetcher = StreamFetcher(self.source_view, self.session, metrics, self.partitions, fetch_wait_ms,
                                     coalesce_bytes, self._unsent)
        self.producer = StreamProducer(self.target_view, self.fetcher, metrics, self.partitions, max_in_flight)
        self.progress = StreamProgress()
        self.max_rounds_in_flight = 0  # the deepest the pipeline got (tests, bench)
        self.overlapped_rounds = 0  # rounds that fetched while earlier rounds' produce answers were due
        self.rounds = 0
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ferry-mirror-stream-{index}", daemon=True)

    def _unsent(self) -> list:
        return self.producer.unsent()

    # ------------------------------------------------------------------ control (other threads)
    def start(self) -> MirrorStream:
        self._thread.start()
        return self

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def assign(self, offsets: dict[TopicPartition, int | None]) -> None:
        """Start mirroring these partitions. Where from is decided by a sync against the offline log
        (tail_sync.py); the offset given is used only for a partition without any checkpoint or committed
        offset (None: the live log start)."""
        if offsets:
            self._commands.put(("assign", dict(offsets), None))

    def revoke(self, partitions: set[TopicPartition], timeout: float = 120.0
               ) -> dict[TopicPartition, PartitionProgress]:
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

    def take_progress(self) -> dict[TopicPartition, PartitionProgress]:
        """Progress of the synced partitions since the last call (their counts are handed over once)."""
        return self.progress.take()

    def committable(self) -> dict[TopicPartition, int]:
        """The live offset copied up to, per synced partition."""
        return self.progress.committable()

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return self.progress.high_watermarks()

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # ------------------------------------------------------------------ thread
    def _run(self) -> None:
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
        times.append(self.session.retry_at)
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
                        self.partitions[tp] = PartitionMirror(tp[0], tp[1], None, assigned=offset,
                                                              count=self.audit and tp[0] != AUDIT_TOPIC)
                self.source_view.stale = self.target_view.stale = True
            elif kind == "resync":
                for tp in arg:
                    pm = self.partitions.get(tp)
                    if pm is not None:
                        pm.sync, pm.sync_retry_at = SYNC_FULL, 0.0
                        self.progress.forget(tp)
            elif kind == "revoke":
                try:
                    fut.set_result(self._take(arg))
                except Exception as e:  # pragma: no cover - _take does not raise
                    fut.set_exception(e)

    def _take(self, partitions: set[TopicPartition]) -> dict[TopicPartition, PartitionProgress]:
        if threading.current_thread() is self._thread or not self.is_alive():
            self.producer.drain()  # nothing of theirs in flight once the caller checkpoints and releases
        self.progress.publish(self.partitions.items())
        out = self.progress.take_partitions(partitions)
        for tp in partitions:
            self.partitions.pop(tp, None)
        if not self.partitions:
            self.fetcher.release_buffers()
        return out

    # ------------------------------------------------------------------ one round
    def _round(self) -> bool:
        """Fetch, send what is new, read what was answered: produce requests stay in flight across rounds
        (up to ``max_in_flight`` batches per partition, in order), so the next fetch does not wait for the
        offline cluster's acks=all. Only a sync, a metadata refresh of the offline side or a revoke waits
        for every answer first."""
        now = time.monotonic()
        if not self.session.ensure_producer_id(now):
            return False
        producer = self.producer
        if producer.in_flight and (self.target_view.due(now) or self.session.sync_due(now)):
            producer.drain()
        topics = sorted({tp[0] for tp in self.partitions})
        self.source_view.refresh_if_due(topics, now)
        self.target_view.refresh_if_due(topics, now)
        self.session.sync_partitions(now)
        fetch_plan = self.fetcher.plan(now)
        produce_plan = producer.plan(now)
        if not fetch_plan and not produce_plan and not producer.in_flight:
            return False
        wait_ms = 0 if produce_plan else self.fetcher.fetch_wait(now)
        if producer.in_flight:
            wait_ms = min(wait_ms, IN_FLIGHT_FETCH_WAIT_MS)  # answers are read between fetches
        fetches = self.fetcher.send(fetch_plan, wait_ms)
        if fetches and producer.in_flight:
            self.overlapped_rounds += 1
            self.metrics.overlapped_rounds.inc()
        producer.send(produce_plan, self.rounds)
        depth = producer.rounds_in_flight()
        self.max_rounds_in_flight = max(self.max_rounds_in_flight, depth)
        self.metrics.rounds_in_flight.labels(str(self.index)).set(depth)
        producer.receive(block=not fetches)
        self.fetcher.receive(fetches)
        producer.receive(block=False)
        self.progress.publish(self.partitions.items())
        return True


def stream_for(tp: TopicPartition, streams: int) -> int:
    """Which stream mirrors a partition: stable across rebalances, spreading one topic's partitions."""
    topic, partition = tp
    h = 0
    for ch in topic.encode():
        h = (h * 31 + ch) & 0x7FFFFFFF
    return (h + partition) % streams


StreamFactory = Callable[[int], MirrorStream]
