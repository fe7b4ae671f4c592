"""StreamSession: the mirror stream's producer id and the syncs that tell each partition where to copy from."""

from __future__ import annotations

import time
from collections.abc import Callable

from ferry.client.wire_client import WireClient
from ferry.mirror.checkpoint import Checkpoint, CheckpointConflict, CheckpointStore, write_one
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_limits import log
from ferry.mirror.partition_mirror import SYNC_FULL, SYNCED, PartitionMirror, TopicPartition, backoff
from ferry.mirror.tail_sync import SyncError, SyncResult, resync_local, sync_partition

Adopt = Callable[[TopicPartition, SyncResult, int, int, bool], bool]  # CheckpointKeeper.adopt


class StreamSession:
    """The producer id the stream writes under, and each partition's sync against the offline log.

    The producer id is the mirror group's (stored with the checkpoints, taken from the offline cluster once),
    the same in every stream. A partition is synced when it is handed over (a full sync from its stored
    checkpoint) and when the offline broker refused its sequence (a local one: someone else wrote after our
    acknowledged prefix); only then is it copied (tail_sync.py).

    ``adopt`` takes over a partition's books after a full sync (default: store the sync's new anchor).
    """

    def __init__(self, index: int, source: WireClient, target: WireClient, metrics: MirrorMetrics,
                 checkpoints: CheckpointStore, adopt: Adopt | None,
                 partitions: dict[TopicPartition, PartitionMirror]) -> None:
        self.index = index
        self.source = source
        self.target = target
        self.metrics = metrics
        self.checkpoints = checkpoints
        self.adopt: Adopt = adopt if adopt is not None else self._store_anchor
        self.partitions = partitions  # the stream's owned partitions (its coordinator adds and removes them)
        self.producer_id: int | None = None
        self.producer_epoch = 0
        self.retry_at = 0.0  # when to ask for a producer id again
        self._failures = 0

    # ------------------------------------------------------------------ producer id
    def ensure_producer_id(self, now: float) -> bool:
        """The mirror group's producer id (stored with the checkpoints, taken from the offline cluster once)."""
        if self.producer_id is not None:
            return True
        if now < self.retry_at:
            return False
        try:
            self.producer_id, self.producer_epoch = self.checkpoints.producer(self.target.init_producer_id)
        except Exception as e:  # offline cluster or live ZooKeeper unreachable: retried with back-off
            self._failures += 1
            self.retry_at = now + backoff(self._failures)
            self.metrics.error("init_producer_id")
            log.warning("mirror stream %d: no producer id yet (%s)", self.index, e)
            return False
        self._failures = 0
        log.info("mirror stream %d: producer id %d epoch %d", self.index, self.producer_id, self.producer_epoch)
        return True

    # ------------------------------------------------------------------ sync
    def sync_due(self, now: float) -> bool:
        """Whether a partition is to be synced now (the offline connections must be idle for it)."""
        return any(pm.sync != SYNCED and pm.sync_retry_at <= now for pm in self.partitions.values())

    def sync_partitions(self, now: float) -> None:
        """Sync the partitions that need it (newly owned, or a sequence refused): where the offline copy
        ends, mapped back to a live offset. Blocking reads; a failure is retried with back-off."""
        for pm in list(self.partitions.values()):
            if pm.sync == SYNCED or pm.sync_retry_at > now:
                continue
            kind = "takeover" if pm.sync == SYNC_FULL else "refused_sequence"
            try:
                if pm.sync == SYNC_FULL:
                    self._full_sync(pm)
                else:
                    self._local_sync(pm)
            except Exception as e:  # brokers or ZooKeeper unreachable, logs that disagree: never copy blind
                pm.sync_failed(time.monotonic())
                self.metrics.error("sync")
                if pm.sync_failures in (1, 10) or pm.sync_failures % 100 == 0:
                    log.warning("%s-%d: sync from the offline log failed (%d times in a row; retrying): %s",
                                pm.topic, pm.partition, pm.sync_failures, e)
                continue
            self.metrics.syncs.labels(kind).inc()

    def _full_sync(self, pm: PartitionMirror) -> None:
        stored = self.checkpoints.read(pm.tp)
        res = sync_partition(self.source, self.target, pm.tp, self.producer_id, self.producer_epoch, stored,
                             pm.assigned, pm.count)
        generation = pm.generation + 1
        if not self.adopt(pm.tp, res, stored.version, generation, pm.count):
            raise SyncError("the checkpoint changed while the partition was synced")
        pm.generation = generation
        pm.start(res.resume, res.offline, res.seq, res.epoch)
        pm.counts.clear()
        level = 40 if "LOST" in res.note else 30 if res.write and stored.checkpoint is not None else 20
        log.log(level, "%s-%d: %s", pm.topic, pm.partition, res.note)

    def _local_sync(self, pm: PartitionMirror) -> None:
        """The offline broker refused a sequence: another writer (a mirror that lost the partition and does
        not know it yet, or an earlier attempt of ours) got there first. Read what it wrote, go on after it."""
        anchor = Checkpoint(pm.acked_live, pm.acked_offline, pm.acked_seq, pm.epoch, pm.acked_offline)
        resume, seq, end, counts = resync_local(self.source, self.target, pm.tp, self.producer_id, anchor,
                                                pm.count)
        pm.start(resume, end, seq, pm.epoch)
        pm.counts.update(counts)
        log.warning("%s-%d: the offline broker refused our sequence: %d more offsets were already there "
                    "(written by another mirror, or by an earlier attempt of ours); copying on from live offset "
                    "%d", pm.topic, pm.partition, end - anchor.offline, resume)

    def _store_anchor(self, tp: TopicPartition, result: SyncResult, version: int, _generation: int,
                      _count: bool) -> bool:
        """``adopt`` without a CheckpointKeeper: store a new anchor before copying from it."""
        if result.write:
            try:
                write_one(self.checkpoints, tp, result.anchor, version)
            except CheckpointConflict:
                return False
        return True
