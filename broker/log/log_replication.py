"""Replication duties of a partition's log (a part of Log): a follower's append of its leader's batches as
they are, truncation to an offset (by leader epoch, on becoming follower), and the replication high
watermark that bounds what consumers may read.

A follower's log must be its leader's byte for byte, batch for batch: the same offsets, the same
partitionLeaderEpoch in every header, no conversion. Offsets are never assigned here, only checked.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
from typing import Any

from ferry.broker.log.append_info import AppendInfo
from ferry.broker.log.log_segment import LogSegment
from ferry.broker.log.producer_state import SNAPSHOT_FILE, ProducerStateManager
from ferry.wire.record.control_batch import control_type
from ferry.wire.record.errors import OffsetMismatchError, StorageError
from ferry.wire.record.record_batch import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    RecordBatchHeader,
    validate_batches,
)

logger = logging.getLogger("ferry.log")


class LogReplication:
    """A follower's append, truncation, the replication high watermark (a part of Log)."""

    # -- follower append ---------------------------------------------------------------------------

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches exactly as the leader wrote them (what its read() returned).

        Checked like a produce (CRC-32C, magic 2, framing; transactional batches and markers accepted)
        but not against max.message.bytes (the leader accepted them) nor the producers' sequences (the
        leader checked them; the state is still kept, so that as leader this replica recognises retries).
        The first batch must start at log_end_offset and each next batch where the previous one ended:
        OffsetMismatchError otherwise, with nothing written. A batch whose partitionLeaderEpoch is newer
        than the epoch cache's latest starts that epoch in the cache. Flushed as produced data is.
        """
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        headers = validate_batches(mv, allow=CONTROL_MASK | TRANSACTIONAL_MASK)
        config = self.config
        with self._lock:
            if self._closed:
                raise StorageError(f"log {self.name} is closed")
            if self.offline:
                raise self.offline_error()
            first = headers[0].base_offset
            if first != self.log_end_offset:
                raise OffsetMismatchError(
                    f"{self.name}: a replica append starts at offset {first}, the log ends at {self.log_end_offset}")
            expected = first
            for h in headers:
                if h.base_offset != expected:
                    raise OffsetMismatchError(
                        f"{self.name}: batch at offset {h.base_offset} does not follow the one ending at {expected}")
                expected = h.next_offset
            try:
                self._follower_write(mv, headers)
            except OSError as e:  # runs written before the failure stay counted: they are whole batches
                raise self.storage_failure("replica append", e) from e
            want_flush = self._appended_messages - self._flushed_messages >= config.flush_interval_messages
        self._after_append(want_flush)
        return AppendInfo(first, expected - 1)

    def _follower_write(self, mv: memoryview, headers: list[RecordBatchHeader]) -> None:
        """Learn the batches' epochs and write them, rolling where the leader did (caller holds the lock)."""
        config = self.config
        cache = self.leader_epoch_cache
        for h in headers:
            if h.partition_leader_epoch > cache.latest_epoch:
                cache.assign(h.partition_leader_epoch, h.base_offset)
        now = self._clock()
        seg = self._segments[-1]
        try:
            start = pos = group = 0
            for i, h in enumerate(headers):
                # Roll where the leader did (before a batch that does not fit): a fetched set may hold
                # more than one segment's worth. Runs of batches that fit go in one write.
                if pos > start and seg.size + (pos - start) + h.size > config.segment_bytes:
                    self._append_raw(seg, mv[start:pos], headers[group:i], now)
                    start, group = pos, i
                if pos == start and seg.should_roll(h.size, h.last_offset, now, config):
                    seg = self._roll(now)
                pos += h.size
            self._append_raw(seg, mv[start:pos], headers[group:], now)
        except BaseException:
            cache.truncate_from_end(self.log_end_offset)  # epochs of batches that were not written
            raise

    def _append_raw(self, seg: LogSegment, view: memoryview, headers: list[RecordBatchHeader], now: int) -> None:
        """Write one run of batches into ``seg`` and account for it (the log end moves per run, so a later
        failure leaves a consistent log)."""
        self.log_end_offset = seg.append_raw(view, headers)
        state = self.producer_state
        pos = 0
        for h in headers:
            if h.producer_id >= 0:
                state.update(h, h.base_offset, now, control_type(view, pos) if h.is_control else -1)
            self._appended_messages += h.records_count
            pos += h.size
        if state.unreplicated:
            state.first_unstable_offset(self.high_watermark)  # forget transactions decided and replicated
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now

    # -- truncation --------------------------------------------------------------------------------

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
            raise ValueError(f"cannot truncate {self.name} to a negative offset {offset}")
        return self._truncating(self._truncate_locked, offset)

    def _truncating(self, change: Callable[[int], Any], offset: int) -> Any:
        """Run a truncation under both locks on an open, online log; an IO error takes the log offline."""
        with self._flush_lock, self._lock:
            if self._closed:
                raise StorageError(f"log {self.name} is closed")
            if self.offline:
                raise self.offline_error()
            try:
                return change(offset)
            except OSError as e:
                raise self.storage_failure("truncation", e) from e

    def _truncate_locked(self, offset: int) -> bool:
        if offset >= self.log_end_offset:
            return False
        if offset < self.log_start_offset:
            self._start_at(offset)
            return True
        segments = self._segments
        i = bisect.bisect_right(self._bases, offset) - 1
        seg = segments[i]
        found = seg.find_batch(offset)
        end = found[1].base_offset if found is not None else seg.next_offset
        old_end, old_active = self.log_end_offset, segments[-1]
        removed = 0
        if end == seg.base_offset and i > 0:
            keep, doomed = segments[:i], segments[i:]
        else:
            keep, doomed = segments[: i + 1], segments[i + 1 :]
            removed = seg.truncate_to(end)
        now = self._clock()
        for d in doomed:
            removed += d.size
            d.mark_deleted()
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, d))
        self._segments = keep
        self._bases = [s.base_offset for s in keep]
        active = keep[-1]
        if active is not old_active:
            active.on_become_active()
        active.flush()  # the cut is durable: a power loss must not bring the removed batches back
        if doomed:
            self._fsync_dir()
        self._set_end(end)
        logger.info("%s: truncated to offset %d (asked %d; the log ended at %d): %d bytes, %d segments removed",
                    self.name, end, offset, old_end, removed, len(doomed))
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (a follower whose log is entirely below, or above,
        what its leader still has)."""
        if offset < 0:
            raise ValueError(f"cannot start {self.name} at a negative offset {offset}")
        self._truncating(self._start_at, offset)

    def _start_at(self, offset: int) -> None:
        now = self._clock()
        old = self._segments
        for seg in old:
            seg.mark_deleted()
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))
        new = LogSegment(self.dir, offset, self.config, now)
        new.on_become_active()
        self._segments = [new]
        self._bases = [offset]
        self._fsync_dir()
        self.log_start_offset = offset
        (self.dir / SNAPSHOT_FILE).unlink(missing_ok=True)
        self.leader_epoch_cache.clear()
        self._set_end(offset)
        logger.warning("%s: emptied (%d segments removed); the log restarts at offset %d", self.name, len(old),
                       offset)

    def _set_end(self, end: int) -> None:
        """After a truncation to ``end``: clamp the offsets that may not pass it, rebuild derived state."""
        self.log_end_offset = end
        self.flushed_offset = min(self.flushed_offset, end)
        if self.replication_hw is not None:
            self.replication_hw = min(max(self.replication_hw, self.log_start_offset), end)
        if self.flushed_offset >= end:
            self._flushed_messages = self._appended_messages
            self._first_unflushed_ms = None
        self.leader_epoch_cache.truncate_from_end(end)
        self.producer_state = ProducerStateManager()
        self._rebuild_producer_state()  # from the snapshot if it is not beyond the new end
        self._snapshot_updates = -1

    # -- replication high watermark ------------------------------------------------------------------

    def set_replication_hw(self, value: int | None) -> int | None:
        """Set the replication high watermark, clamped to [log_start_offset, log_end_offset]; None removes
        the bound (an unreplicated log). High-watermark listeners run when what consumers may read grew.
        Returns the value set."""
        with self._lock:
            before = self.high_watermark
            if value is None:
                self.replication_hw = None
            else:
                self.replication_hw = min(max(value, self.log_start_offset), self.log_end_offset)
            grew = self.high_watermark > before
            hw = self.replication_hw
        if grew:
            self._notify()
        return hw
