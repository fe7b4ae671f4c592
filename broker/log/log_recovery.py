"""Opening a partition's log: segments loaded, a torn or corrupt tail recovered after the recovery point, idempotent-producer state rebuilt."""

from __future__ import annotations

import logging
import os

from ferry.broker.log.leader_epoch_cache import EpochEntry, LeaderEpochCheckpointError, LeaderEpochFileCache
from ferry.broker.log.log_segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from ferry.broker.log.producer_state import ProducerStateManager
from ferry.wire.record.control_batch import CONTROL_PREFIX, control_type

logger = logging.getLogger("ferry.log")


class LogRecovery:
    """Opening a partition's log: segments loaded, a torn or corrupt tail recovered after the recovery point, idempotent-producer state rebuilt. (a part of Log)."""

    def _load(self, recovery_point: int | None) -> None:
        now = self._clock()
        bases: list[int] = []
        names = os.listdir(self.dir)
        present = set(names)  # one listing, no stat per file: a start opens thousands of logs
        for entry in names:
            if entry.endswith(DELETED_SUFFIX) or entry.endswith(".tmp"):
                # left by a deletion or a checkpoint write that did not finish
                (self.dir / entry).unlink(missing_ok=True)
                continue
            stem, dot, suffix = entry.partition(".")
            if not (len(stem) == 20 and stem.isdigit()):
                continue
            if "." + suffix == LOG_SUFFIX:
                bases.append(int(stem))
            elif "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and stem + LOG_SUFFIX not in present:
                logger.info("%s: removing index %s without a log file", self.name, entry)
                (self.dir / entry).unlink(missing_ok=True)
        bases.sort()
        new_log = not bases
        if new_log:
            # A new log: nothing to verify or make durable yet; its directory is fsynced by the first flush
            # (a broker creating thousands of partitions then pays no fsync per partition up front).
            bases = [0]
            self._dir_dirty = True
        segments = [LogSegment(self.dir, b, self.config, now) for b in bases]
        last = len(segments) - 1
        recovered: list[LogSegment] = []
        i = 0
        while i < len(segments) and not new_log:
            seg = segments[i]
            must_verify = i == last if recovery_point is None else False
            reason = None if must_verify else seg.load(now)
            if must_verify or reason is not None or (
                recovery_point is not None and seg.next_offset > recovery_point and seg.size > 0
            ):
                if reason is not None:
                    logger.warning("%s: segment %d needs recovery: %s", self.name, seg.base_offset, reason)
                truncated = seg.recover(now)
                recovered.append(seg)
                if truncated and i < last:
                    # Offsets must stay contiguous: whatever followed the damage goes too.
                    for later in segments[i + 1 :]:
                        logger.error(
                            "%s: deleting segment %d (%d bytes) after the truncated segment %d",
                            self.name, later.base_offset, later.size, seg.base_offset,
                        )
                        later.delete()
                    segments = segments[: i + 1]
                    last = i
            i += 1
        for seg in segments[:-1]:
            seg.on_become_inactive()
        segments[-1].on_become_active()
        for seg in recovered:
            seg.flush()  # what survived recovery is now durable: flushed_offset may cover it
        if recovered:
            self._fsync_dir()
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = segments[0].base_offset
        self.log_end_offset = segments[-1].next_offset
        self.flushed_offset = self.log_end_offset
        self._rebuild_producer_state(at_load=True)
        self._load_leader_epoch_cache()
        for seg in recovered:  # epochs of recovered data whose checkpoint write a crash lost (Kafka does the same)
            for epoch, offset in getattr(seg, "recovered_epochs", ()):
                if offset >= self.log_start_offset:
                    self.leader_epoch_cache.assign(epoch, offset)
        self.recovered_segments = len(recovered)
        # One line per log only when something was verified (a start with thousands of logs says it in a summary).
        logger.log(
            logging.INFO if recovered else logging.DEBUG,
            "%s: loaded %d segments (%d verified), offsets [%d, %d)", self.name, len(segments),
            len(recovered), self.log_start_offset, self.log_end_offset,
        )

    def _load_leader_epoch_cache(self) -> None:
        """The epoch cache as of the recovered log: entries past a truncated tail dropped, the first moved to
        the log start. A damaged checkpoint (never seen: it is replaced atomically) is rebuilt from the
        batches' partitionLeaderEpoch."""
        try:
            cache = LeaderEpochFileCache(self.dir)
        except LeaderEpochCheckpointError as exc:
            logger.error("%s: %s; rebuilding it from the log", self.name, exc)
            cache = LeaderEpochFileCache(self.dir, self._epochs_in_log())
        dropped = cache.truncate_from_end(self.log_end_offset)
        if dropped:
            logger.warning("%s: leader epochs %s start beyond the log end %d; dropped", self.name, dropped,
                           self.log_end_offset)
        cache.truncate_from_start(self.log_start_offset)
        cache.io_failed = self.storage_failure
        self.leader_epoch_cache = cache

    def _epochs_in_log(self) -> list[EpochEntry]:
        """(epoch, first offset) each time the batches' partitionLeaderEpoch grows (a full header scan)."""
        entries: list[EpochEntry] = []
        latest = -1
        for seg in self._segments:
            for _, h in seg.iter_headers(0):
                if h.partition_leader_epoch > latest:
                    latest = h.partition_leader_epoch
                    entries.append(EpochEntry(latest, h.base_offset))
        return entries

    def _rebuild_producer_state(self, at_load: bool = False) -> None:
        """From the snapshot (if it lies within the log) plus a scan of what follows it.

        At load a usable snapshot stays on disk (the data it covers is unchanged until a truncation, which
        removes it), and counts as written when nothing followed it: a restart with thousands of logs then
        rewrites no snapshot. Otherwise (a truncation, a snapshot beyond the log) it is removed at once, so a
        later crash never combines an old snapshot with a truncated log.
        """
        snap = ProducerStateManager.take_snapshot(self.dir, keep=at_load)
        start = self.log_start_offset
        used = snap is not None and self.log_start_offset <= snap[0] <= self.log_end_offset
        if snap is not None and not used and at_load:
            ProducerStateManager.remove_snapshot(self.dir)
        if used:
            start, self.producer_state = snap
        state = self.producer_state
        for seg in self._segments:
            if seg.next_offset <= start:
                continue
            found = seg.find_batch(start)
            if found is None:
                continue
            for pos, h in seg.iter_headers(found[0]):
                if h.producer_id >= 0 and h.base_offset >= start:
                    control = control_type(os.pread(seg.fd, CONTROL_PREFIX, pos)) if h.is_control else -1
                    state.update(h, h.base_offset, control=control)
        state.first_unstable_offset(self.high_watermark)  # decided transactions below it are stable
        if at_load and used and state.updates == 0 and start == self.log_end_offset:
            self._snapshot_updates = 0  # the snapshot on disk is this state: nothing to write
