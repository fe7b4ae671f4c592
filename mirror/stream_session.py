"""The mirror stream's producer id, the sync of newly owned partitions, and its view of both clusters' metadata."""

from __future__ import annotations

import time

from ferry.client.errors import ClientError
from ferry.client.wire_client import WireClient
from ferry.mirror.checkpoint import Checkpoint
from ferry.mirror.mirror_limits import (
    METADATA_MIN_INTERVAL_S,
    log,
)
from ferry.mirror.partition_mirror import (
    SYNC_FULL,
    SYNCED,
    PartitionMirror,
    backoff,
)
from ferry.mirror.tail_sync import SyncError, resync_local, sync_partition
from ferry.zk.topic_name import AUDIT_TOPIC


class MirrorSession:
    """The producer id, partition syncs and both clusters' metadata (a part of MirrorStream)."""

    # ------------------------------------------------------------------ producer id
    def _ensure_producer_id(self, now: float) -> bool:
        """The mirror group's producer id (stored with the checkpoints, taken from the offline cluster once)."""
        if self.producer_id is not None:
            return True
        if now < self._pid_retry_at:
            return False
        try:
            self.producer_id, self.producer_epoch = self.checkpoints.producer(self.target.init_producer_id)
        except Exception as e:  # offline cluster or live ZooKeeper unreachable: retried with back-off
            self._pid_failures += 1
            self._pid_retry_at = now + backoff(self._pid_failures)
            self.metrics.error("init_producer_id")
            log.warning("mirror stream %d: no producer id yet (%s)", self.index, e)
            return False
        self._pid_failures = 0
        log.info("mirror stream %d: producer id %d epoch %d", self.index, self.producer_id, self.producer_epoch)
        return True

    # ------------------------------------------------------------------ sync
    def _counts(self, pm: PartitionMirror) -> bool:
        return self.audit and pm.topic != AUDIT_TOPIC

    def _sync_partitions(self, now: float) -> None:
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
            self.sequences[pm.tp] = pm.acked_seq

    def _full_sync(self, pm: PartitionMirror) -> None:
        stored = self.checkpoints.read(pm.tp)
        count = self._counts(pm)
        res = sync_partition(self.source, self.target, pm.tp, self.producer_id, self.producer_epoch, stored,
                             pm.assigned, count)
        generation = pm.generation + 1
        if not self.adopt(pm.tp, res, stored.version, generation, count):
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
                                                self._counts(pm))
        pm.start(resume, end, seq, pm.epoch)
        pm.counts.update(counts)
        log.warning("%s-%d: the offline broker refused our sequence: %d more offsets were already there "
                    "(written by another mirror, or by an earlier attempt of ours); copying on from live offset "
                    "%d", pm.topic, pm.partition, end - anchor.offline, resume)

    # ------------------------------------------------------------------ metadata
    def _refresh_metadata(self, now: float) -> None:
        topics = sorted({tp[0] for tp in self.partitions})
        if self._source_stale and now >= self._source_refreshed:
            self._source_stale, self._source_refreshed, self._source_md_failures = self._refresh(
                self.source, "live", topics, now, self._source_md_failures)
        if self._target_stale and now >= self._target_refreshed:
            self._target_stale, self._target_refreshed, self._target_md_failures = self._refresh(
                self.target, "offline", topics, now, self._target_md_failures)

    def _refresh(self, client: WireClient, which: str, topics: list[str], now: float,
                 failures: int) -> tuple[bool, float, int]:
        """Returns (still stale, earliest next refresh, consecutive failures)."""
        try:
            client.refresh_metadata(topics)
            return False, now + METADATA_MIN_INTERVAL_S, 0
        except ClientError as e:
            failures += 1
            self.metrics.error(f"{which}_metadata")
            if failures in (1, 10) or failures % 100 == 0:
                log.warning("mirror stream %d: %s metadata unavailable (%d times in a row; retrying): %s",
                            self.index, which, failures, e)
            return True, now + max(METADATA_MIN_INTERVAL_S, backoff(failures)), failures
