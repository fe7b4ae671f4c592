"""Truncation of a partition's log: to an offset (a follower's log cut back to its leader's, by leader epoch),
or emptied and restarted at an offset (a follower entirely below, or above, what its leader still has)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ferry.broker.log.leader_epoch_cache import LeaderEpochFileCache
from ferry.broker.log.local_log import LocalLog
from ferry.broker.log.log_flush import LogDurability
from ferry.broker.log.log_offline import LogStatus
from ferry.broker.log.log_offsets import LogOffsets
from ferry.broker.log.log_recovery import rebuild_producer_state
from ferry.broker.log.producer_state import SNAPSHOT_FILE, ProducerStateManager

logger = logging.getLogger("ferry.log")


class LogTruncation:
    """Cuts the log's tail and brings the offsets, the epochs and the producer state back in line with it."""

    def __init__(self, status: LogStatus, flush_lock: threading.Lock, lock: threading.RLock, local: LocalLog,
                 offsets: LogOffsets, durability: LogDurability, epochs: LeaderEpochFileCache,
                 producers: ProducerStateManager, clock: Callable[[], int]) -> None:
        # the guards, then what a truncation changes, in the order it changes them
        self._status = status
        self._flush_lock = flush_lock
        self._lock = lock
        self._local = local
        self._offsets = offsets
        self._durability = durability
        self._epochs = epochs
        self._producers = producers
        self._clock = clock

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at or after ``offset`` (whole batches: if ``offset`` falls inside one, the log
        ends at that batch's base offset). Returns False when there is nothing to remove.

        Later segments go (renamed ``*.deleted``, removed after file.delete.delay.ms as retention does, so
        that reads in flight finish), the last kept segment and its indexes are cut and fsync'd, the
        producer state is rebuilt, the epoch cache loses the epochs starting at or after the new end, and
        flushed_offset (the recovery point) and replication_hw are clamped to it. Below log_start_offset
        the log is emptied and restarts at ``offset`` (truncate_fully_and_start_at).
        """
        if offset < 0:
            raise ValueError(f"cannot truncate {self._local.name} to a negative offset {offset}")
        return self._truncating(self._truncate_locked, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset``."""
        if offset < 0:
            raise ValueError(f"cannot start {self._local.name} at a negative offset {offset}")
        self._truncating(self._start_at, offset)

    def _truncating(self, change: Callable[[int], bool], offset: int) -> bool:
        """Run a truncation under both locks on an open, online log; an IO error takes the log offline."""
        with self._flush_lock, self._lock:
            self._status.check_open()
            try:
                return change(offset)
            except OSError as e:
                raise self._status.storage_failure("truncation", e) from e

    def _truncate_locked(self, offset: int) -> bool:
        offsets = self._offsets
        if offset >= offsets.end:
            return False
        if offset < offsets.start:
            return self._start_at(offset)
        old_end = offsets.end
        end, removed, n_removed = self._local.truncate_to(offset, self._clock())
        self._set_end(end)
        logger.info("%s: truncated to offset %d (asked %d; the log ended at %d): %d bytes, %d segments removed",
                    self._local.name, end, offset, old_end, removed, n_removed)
        return True

    def _start_at(self, offset: int) -> bool:
        local = self._local
        n_removed = local.restart_at(offset, self._clock())
        self._offsets.restart_at(offset)
        (local.dir / SNAPSHOT_FILE).unlink(missing_ok=True)
        self._epochs.clear()
        self._set_end(offset)
        logger.warning("%s: emptied (%d segments removed); the log restarts at offset %d", local.name, n_removed,
                       offset)
        return True

    def _set_end(self, end: int) -> None:
        """After a truncation to ``end``: clamp the offsets that may not pass it, rebuild derived state."""
        offsets = self._offsets
        offsets.truncate_to(end)
        self._durability.truncated()
        self._epochs.truncate_from_end(end)
        # from the snapshot if it is not beyond the new end
        rebuild_producer_state(self._local.dir, self._local.segments, self._producers, offsets.start, end,
                               offsets.high_watermark)
