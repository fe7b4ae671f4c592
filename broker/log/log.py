"""A partition's log: a directory of segments ordered by base offset (paper 3.1).

``Log`` is the coordinator (Kafka 3.x's UnifiedLog): it opens the log (log_recovery.py) and hands each duty to
the collaborator that owns it: LocalLog (the segment files), LogOffsets (start, end, flushed, replication high
watermark), LogAppender (every append), LogDurability (when and how data becomes durable), LogRetention (where
the log starts), LogTruncation (cutting its tail), LogTransactions (LSO, aborted transactions, markers),
LogCompaction (what the cleaner may rewrite, and its swap) and LogStatus (closed or offline). Consumers see
only flushed data unless the config says otherwise.

The hot methods (append, append_batch, append_batches, append_as_follower, flush) are the collaborators' bound
methods, set once per log: a produce request pays no extra call for the coordinator.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ferry.broker.log.local_log import FetchSlice, LocalLog
from ferry.broker.log.log_appender import LogAppender
from ferry.broker.log.log_compaction import LogCompaction
from ferry.broker.log.log_flush import LogDurability
from ferry.broker.log.log_offline import IoFailureHook, LogStatus
from ferry.broker.log.log_offsets import LogOffsets
from ferry.broker.log.log_recovery import load_leader_epoch_cache, load_segments, rebuild_producer_state
from ferry.broker.log.log_replication import LogTruncation
from ferry.broker.log.log_retention import LogRetention
from ferry.broker.log.log_segment import LogSegment
from ferry.broker.log.log_transactions import LogTransactions
from ferry.broker.log.producer_state import ProducerStateManager
from ferry.wire.log_config import LogConfig
from ferry.wire.record.errors import KafkaStorageError, LogOffsetOutOfRangeError

logger = logging.getLogger("ferry.log")

__all__ = ["FetchSlice", "Log", "wall_clock_ms"]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Log:
    """One partition's log: the public face its collaborators share (see the module docstring)."""

    def __init__(
        self,
        directory: Path | str,
        config: LogConfig | None = None,
        now_ms: Callable[[], int] = wall_clock_ms,
        recovery_point: int | None = None,
        replication_hw: int | None = None,
    ) -> None:
        """Open (recovering if needed) or create the log in ``directory``.

        ``recovery_point``: offset up to which the data is known to be flushed (from the log
        manager's checkpoint); segments holding data beyond it are scanned and verified. None
        means unknown: the last segment is verified. ``replication_hw``: the replication high
        watermark last checkpointed (clamped to the log), None for an unreplicated log.
        """
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = self.dir.name
        config = config if config is not None else LogConfig()
        self._clock = now_ms
        lock = self._lock = threading.RLock()
        flush_lock = self._flush_lock = threading.Lock()
        self._listeners: list[Callable[[Log], None]] = []
        self.flush_requested: Callable[[Log], None] | None = None  # set by LogManager
        self.status = LogStatus(self.name)

        segments, recovered, new_log = load_segments(self.dir, config, now_ms(), recovery_point)
        local = self.local = LocalLog(self.dir, config, segments, dir_dirty=new_log)
        start, end = segments[0].base_offset, segments[-1].next_offset
        offsets = self.offsets = LogOffsets(start, end, config.consumers_see_unflushed)
        state = self.producer_state = ProducerStateManager()
        if rebuild_producer_state(self.dir, segments, state, start, end, offsets.high_watermark, at_load=True):
            state.saved_updates = 0  # the snapshot on disk is this state: nothing to write
        epochs = self.leader_epoch_cache = load_leader_epoch_cache(self.dir, segments, recovered, start, end)
        epochs.io_failed = self.status.storage_failure
        self.recovered_segments = len(recovered)
        # One line per log only when something was verified (a start with thousands of logs says it in a summary).
        logger.log(logging.INFO if recovered else logging.DEBUG, "%s: loaded %d segments (%d verified), offsets "
                   "[%d, %d)", self.name, len(segments), len(recovered), start, end)
        if replication_hw is not None:
            offsets.set_replication_hw(replication_hw)

        durability = self._durability = LogDurability(local, offsets, epochs, self.status, lock, flush_lock,
                                                      now_ms, self._notify)
        appender = LogAppender(local, offsets, state, epochs, self.status, durability, lock, now_ms, self._after_append)
        retention = LogRetention(local, offsets, state, epochs, self.status, lock, now_ms)
        truncation = LogTruncation(self.status, flush_lock, lock, local, offsets, durability, epochs, state, now_ms)
        self._transactions = LogTransactions(state, offsets, lock, appender.append, now_ms)
        transactions = self._transactions
        self.compaction = LogCompaction(local, offsets, state, self.status, lock, now_ms,
                                        lambda: transactions.last_stable_offset)
        self.append = appender.append
        self.append_batch = appender.append_batch
        self.append_batches = appender.append_batches
        self.append_as_follower = appender.append_as_follower
        self.flush = durability.flush
        self.needs_flush = durability.needs_flush
        self.delete_retained = retention.delete_retained
        self.roll_if_needed = retention.roll_if_needed
        self.expire_producers = retention.expire_producers
        self.delete_records_before = retention.delete_records_before
        self.restore_log_start = retention.restore_log_start
        self.truncate_to = self.compaction.after_truncation(truncation.truncate_to)
        self.truncate_fully_and_start_at = truncation.truncate_fully_and_start_at
        self.aborted_transactions = self._transactions.aborted_transactions
        self.append_marker = self._transactions.append_marker
        self.forget_stable = self._transactions.forget_stable

    # -- state -----------------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self.local.config

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.local.update_config(config)
            self.offsets.see_unflushed = config.consumers_see_unflushed

    @property
    def log_start_offset(self) -> int:
        return self.offsets.start

    @property
    def log_end_offset(self) -> int:
        return self.offsets.end

    @property
    def flushed_offset(self) -> int:
        """The recovery point: everything below it is durable."""
        return self.offsets.flushed

    @property
    def replication_hw(self) -> int | None:
        return self.offsets.replication_hw

    @property
    def high_watermark(self) -> int:
        """The end of what a fetch may read (exclusive): flushed data (or all appended data with
        consumers.see.unflushed), and no further than the replication high watermark when there is one."""
        return self.offsets.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self._transactions.last_stable_offset

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self.local.segments)

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return self.local.size_in_bytes

    @property
    def unflushed_messages(self) -> int:
        return self._durability.unflushed_messages

    @property
    def offline(self) -> bool:
        return self.status.offline

    @property
    def io_failed(self) -> IoFailureHook | None:
        return self.status.io_failed

    @io_failed.setter
    def io_failed(self, hook: IoFailureHook | None) -> None:
        self.status.io_failed = hook

    def mark_offline(self) -> None:
        """Another log of the same directory failed: stop touching this one's files too."""
        self.status.mark_offline()

    # -- high watermark --------------------------------------------------------------------------

    def add_high_watermark_listener(self, callback: Callable[[Log], None]) -> None:
        """``callback(log)`` runs (in the thread that moved it) whenever high_watermark grows."""
        with self._lock:
            self._listeners.append(callback)

    def _notify(self) -> None:
        for cb in list(self._listeners):
            try:
                cb(self)
            except Exception:
                logger.exception("high watermark listener of %s failed", self.name)

    def _after_append(self, want_flush: bool) -> None:
        """Outside the lock: wake the readers that may see unflushed data, ask for the flush it wants."""
        if self.offsets.see_unflushed:
            self._notify()
        if want_flush and self.flush_requested is not None:
            self.flush_requested(self)

    def set_replication_hw(self, value: int | None) -> int | None:
        """Set the replication high watermark, clamped to [log_start_offset, log_end_offset]; None removes
        the bound (an unreplicated log). High-watermark listeners run when what consumers may read grew.
        Returns the value set."""
        offsets = self.offsets
        with self._lock:
            before = offsets.high_watermark
            offsets.set_replication_hw(value)
            grew = offsets.high_watermark > before
            hw = offsets.replication_hw
        if grew:
            self._notify()
        return hw

    # -- read ------------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> FetchSlice | None:
        """Whole batches from the one containing ``offset``, ending before ``upper_bound``
        (default: the high watermark), at most ``max_bytes`` unless the first batch alone is
        larger. None when there is nothing to read yet. LogOffsetOutOfRangeError outside
        [log_start_offset, log_end_offset]; KafkaStorageError once the directory is offline."""
        offsets = self.offsets
        with self._lock:
            if self.status.offline:
                raise self.status.offline_error()
            if offset < offsets.start or offset > offsets.end:
                raise LogOffsetOutOfRangeError(
                    f"offset {offset} is out of range [{offsets.start}, {offsets.end}] of {self.name}")
            bound = offsets.high_watermark if upper_bound is None else min(upper_bound, offsets.end)
            if offset >= bound:
                return None
            try:
                return self.local.read(offset, max_bytes, bound)
            except OSError as e:
                raise self.status.storage_failure("read", e) from e

    def offset_for_timestamp(self, timestamp_ms: int, upper_bound: int | None = None) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch with max_timestamp >= ``timestamp_ms``
        below ``upper_bound`` (default: the high watermark), or None."""
        with self._lock:
            offsets = self.offsets
            bound = offsets.high_watermark if upper_bound is None else min(upper_bound, offsets.end)
            return self.local.offset_for_timestamp(timestamp_ms, bound)

    def max_timestamp_offset(self, upper_bound: int | None = None) -> tuple[int, int] | None:
        """(base offset, timestamp) of the batch with the largest timestamp below ``upper_bound`` (default: the
        high watermark), or None for an empty log."""
        with self._lock:
            offsets = self.offsets
            bound = offsets.high_watermark if upper_bound is None else min(upper_bound, offsets.end)
            return self.local.max_timestamp_offset(bound)

    # -- durability ------------------------------------------------------------------------------

    def maybe_flush(self) -> bool:
        if self.needs_flush():
            self.flush()
            return True
        return False

    def snapshot_producer_state(self) -> bool:
        """Save the idempotence state (if it changed) so the next start scans only what follows.

        Safe at any time: a snapshot beyond the log end after a crash is ignored at load.
        """
        state = self.producer_state
        with self._flush_lock:
            with self._lock:
                if self.status.closed or self.status.offline or state.updates == state.saved_updates:
                    return False
                updates = state.updates
                text = state.dump(self.offsets.end)
            try:
                ProducerStateManager.write_snapshot_text(self.dir, text)
            except OSError as e:
                raise self.status.storage_failure("producer state snapshot", e) from e
            state.saved_updates = updates
            return True

    def close(self) -> None:
        """Flush, save the producer state, trim the indexes and close every file (an offline log: close only)."""
        status = self.status
        if status.closed:
            return
        try:
            self.flush()
        except KafkaStorageError:
            pass  # reported once; the log is offline now and closes without writing
        with self._flush_lock, self._lock:
            if status.closed:
                return
            status.closed = True
            if status.offline:
                self.local.close_without_writing()
                return
            try:
                self.producer_state.write_snapshot(self.dir, self.offsets.end)
                self.local.flush_all()
                self.leader_epoch_cache.flush()
            except OSError as e:
                status.storage_failure("close", e)
                self.local.close_without_writing()
                return
            self.local.close_files()

    def __repr__(self) -> str:
        o = self.offsets
        return f"Log({self.name}, [{o.start}, {o.end}), flushed={o.flushed})"
