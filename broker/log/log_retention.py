"""Retention: whole segments deleted by time and size (never the active one), expired producers dropped, their state snapshotted."""

from __future__ import annotations

import logging
import os

from ferry.broker.log.log_segment import (
    LogSegment,
)
from ferry.broker.log.producer_state import ProducerStateManager

logger = logging.getLogger("ferry.log")


class LogRetention:
    """Retention: whole segments deleted by time and size (never the active one), expired producers dropped, their state snapshotted. (a part of Log)."""

    def delete_retained(self, now_ms: int | None = None) -> int:
        """Delete whole segments past retention.ms (by their largest timestamp) or beyond
        retention.bytes, oldest first, never the active one nor unflushed data nor data above the
        replication high watermark (not every replica has it yet). Moves log_start_offset (and the
        first leader epoch's start with it). Returns the number of segments deleted."""
        with self._lock:
            if self.offline:
                return 0  # nothing touches an offline directory's files
            now = self._clock() if now_ms is None else now_ms
            config = self.config
            candidates = self._segments[:-1]
            doomed: list[LogSegment] = []
            bound = self.flushed_offset
            if self.replication_hw is not None:
                bound = min(bound, self.replication_hw)
            if config.retention_ms >= 0:
                for seg in candidates:
                    if seg.next_offset > bound:
                        break
                    ts = seg.max_timestamp if seg.max_timestamp >= 0 else int(os.fstat(seg.fd).st_mtime * 1000)
                    if now - ts <= config.retention_ms:
                        break
                    doomed.append(seg)
            if config.retention_bytes >= 0:
                total = sum(s.size for s in self._segments) - sum(s.size for s in doomed)
                for seg in candidates[len(doomed) :]:
                    if seg.next_offset > bound or total - seg.size < config.retention_bytes:
                        break
                    doomed.append(seg)
                    total -= seg.size
            if doomed:
                n = len(doomed)
                self._segments = self._segments[n:]
                self._bases = self._bases[n:]
                self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
                self.producer_state.forget_aborted_before(self.log_start_offset)
                self._pending_deletes.extend((now + config.file_delete_delay_ms, seg) for seg in doomed)
                try:
                    for seg in doomed:
                        seg.mark_deleted()
                except OSError as e:  # offline: an offline log deletes nothing; the next open decides again
                    raise self.storage_failure("retention", e) from e
                logger.info(
                    "%s: retention deleted %d segments; log start offset is now %d",
                    self.name, n, self.log_start_offset,
                )
                # a failed write is the directory's failure (KafkaStorageError through the cache's io_failed)
                self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
            self._delete_pending(now)
            return len(doomed)

    def roll_if_needed(self, now_ms: int | None = None) -> bool:
        """Roll the active segment when it is older than segment.ms (so retention can reach it)."""
        with self._lock:
            now = self._clock() if now_ms is None else now_ms
            seg = self._segments[-1]
            if self._closed or self.offline or seg.size == 0 or now - seg.created_ms <= self.config.segment_ms:
                return False
            try:
                self._roll(now)
            except OSError as e:
                raise self.storage_failure("segment roll", e) from e
            return True

    def expire_producers(self, now_ms: int | None = None) -> int:
        """Forget idempotent producers idle longer than producer.id.expiration.ms; returns how many."""
        with self._lock:
            if self._closed:
                return 0
            now = self._clock() if now_ms is None else now_ms
            n = self.producer_state.expire(now, self.config.producer_id_expiration_ms)
        if n:
            logger.info("%s: forgot %d producer id(s) idle for more than %d ms", self.name, n,
                        self.config.producer_id_expiration_ms)
        return n

    def _delete_pending(self, now: int | None) -> None:
        keep = []
        for deadline, seg in self._pending_deletes:
            if now is None or deadline <= now:
                seg.delete()
            else:
                keep.append((deadline, seg))
        self._pending_deletes = keep

    def snapshot_producer_state(self) -> bool:
        """Save the idempotence state (if it changed) so the next start scans only what follows.

        Safe at any time: a snapshot beyond the log end after a crash is ignored at load.
        """
        with self._flush_lock:
            with self._lock:
                if self._closed or self.offline or self.producer_state.updates == self._snapshot_updates:
                    return False
                updates = self.producer_state.updates
                text = self.producer_state.dump(self.log_end_offset)
            try:
                ProducerStateManager.write_snapshot_text(self.dir, text)
            except OSError as e:
                raise self.storage_failure("producer state snapshot", e) from e
            self._snapshot_updates = updates
            return True
