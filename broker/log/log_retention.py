"""Moving a partition log's start offset: retention (whole segments past retention.ms or beyond
retention.bytes, never the active one), DeleteRecords (KIP-107: any offset up to the high watermark), and the
active segment rolled by age (segment.ms) so that retention can reach it.

Retention moves ``log_start_offset`` to a segment boundary; DeleteRecords moves it to any offset: records below
it are no longer readable (Fetch and ListOffsets earliest answer from the new start) and every whole segment
below it is deleted (renamed ``.deleted``, removed after ``file.delete.delay.ms`` like retention's). A start
inside a segment cannot be recovered from the files (recovery starts a log at its first segment's base offset),
so it is written to ``<partition dir>/log-start-offset`` (one decimal line, replaced atomically) and read back
when the broker opens its logs. Kafka keeps the same number in its ``log-start-offset-checkpoint``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from ferry.broker.log.leader_epoch_cache import LeaderEpochFileCache
from ferry.broker.log.local_log import LocalLog
from ferry.broker.log.log_offline import LogStatus
from ferry.broker.log.log_offsets import LogOffsets
from ferry.broker.log.log_segment import LogSegment
from ferry.broker.log.producer_state import ProducerStateManager
from ferry.wire.atomic_file import atomic_write
from ferry.wire.record.errors import LogOffsetOutOfRangeError

logger = logging.getLogger("ferry.log")

LOG_START_FILE = "log-start-offset"


class LogRetention:
    """Where the log starts, which old segments go, which idle producers are forgotten."""

    def __init__(self, local: LocalLog, offsets: LogOffsets, producers: ProducerStateManager,
                 epochs: LeaderEpochFileCache, status: LogStatus, lock: threading.RLock,
                 clock: Callable[[], int]) -> None:
        self._local = local
        self._offsets = offsets
        self._producers = producers
        self._epochs = epochs
        self._status = status
        self._lock = lock
        self._clock = clock

    def delete_retained(self, now_ms: int | None = None) -> int:
        """Delete whole segments past retention.ms (by their largest timestamp) or beyond
        retention.bytes, oldest first, never the active one nor unflushed data nor data above the
        replication high watermark (not every replica has it yet). Moves log_start_offset (and the
        first leader epoch's start with it). Returns the number of segments deleted."""
        local, offsets = self._local, self._offsets
        with self._lock:
            if self._status.offline:
                return 0  # nothing touches an offline directory's files
            now = self._clock() if now_ms is None else now_ms
            n = self._retained_count(now)
            if n:
                offsets.advance_start(local.segments[n].base_offset)
                self._producers.forget_aborted_before(offsets.start)
                try:
                    local.retire_first(n, now)
                except OSError as e:  # offline: an offline log deletes nothing; the next open decides again
                    raise self._status.storage_failure("retention", e) from e
                logger.info("%s: retention deleted %d segments; log start offset is now %d", local.name, n,
                            offsets.start)
                # a failed write is the directory's failure (KafkaStorageError through the cache's io_failed)
                self._epochs.truncate_from_start(offsets.start)
            local.delete_pending(now)
            return n

    def _retained_count(self, now: int) -> int:
        """How many of the oldest segments retention deletes now."""
        config = self._local.config
        if not config.delete:
            return 0  # cleanup.policy=compact: the cleaner, not retention, removes records
        segments = self._local.segments
        candidates = segments[:-1]
        doomed: list[LogSegment] = []
        bound = self._offsets.flushed
        if self._offsets.replication_hw is not None:
            bound = min(bound, self._offsets.replication_hw)
        if config.retention_ms >= 0:
            for seg in candidates:
                if seg.next_offset > bound:
                    break
                ts = seg.max_timestamp if seg.max_timestamp >= 0 else int(os.fstat(seg.fd).st_mtime * 1000)
                if now - ts <= config.retention_ms:
                    break
                doomed.append(seg)
        if config.retention_bytes >= 0:
            total = sum(s.size for s in segments) - sum(s.size for s in doomed)
            for seg in candidates[len(doomed) :]:
                if seg.next_offset > bound or total - seg.size < config.retention_bytes:
                    break
                doomed.append(seg)
                total -= seg.size
        return len(doomed)

    def roll_if_needed(self, now_ms: int | None = None) -> bool:
        """Roll the active segment when it is older than segment.ms (so retention can reach it)."""
        local, status = self._local, self._status
        with self._lock:
            now = self._clock() if now_ms is None else now_ms
            seg = local.segments[-1]
            if status.closed or status.offline or seg.size == 0 or now - seg.created_ms <= local.config.segment_ms:
                return False
            try:
                local.roll(self._offsets.end, now)
            except OSError as e:
                raise status.storage_failure("segment roll", e) from e
            return True

    def expire_producers(self, now_ms: int | None = None) -> int:
        """Forget idempotent producers idle longer than producer.id.expiration.ms; returns how many."""
        expiration_ms = self._local.config.producer_id_expiration_ms
        with self._lock:
            if self._status.closed:
                return 0
            now = self._clock() if now_ms is None else now_ms
            n = self._producers.expire(now, expiration_ms)
        if n:
            logger.info("%s: forgot %d producer id(s) idle for more than %d ms", self._local.name, n, expiration_ms)
        return n

    # -- DeleteRecords ---------------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Make ``offset`` the log's start (records below it are gone); returns the new log start offset.

        ``offset`` must be at most the high watermark (LogOffsetOutOfRangeError otherwise, nothing changed); an
        offset at or below the current start changes nothing. KafkaStorageError when the log is offline."""
        local, offsets, status = self._local, self._offsets, self._status
        with self._lock:
            if status.offline:
                raise status.offline_error()
            hw = offsets.high_watermark
            if offset > hw:
                raise LogOffsetOutOfRangeError(f"offset {offset} is above the high watermark {hw} of {local.name}")
            if offset <= offsets.start:
                return offsets.start
            self._move_start(offset)
            try:
                atomic_write(local.dir / LOG_START_FILE, f"{offset}\n".encode())
            except OSError as e:
                raise status.storage_failure("writing the log start offset", e) from e
            logger.info("%s: records before %d deleted on request; log start offset is now %d", local.name, offset,
                        offsets.start)
            return offsets.start

    def restore_log_start(self) -> bool:
        """Apply the start offset a DeleteRecords saved (if the log still reaches it); True when it moved."""
        local, offsets = self._local, self._offsets
        path = local.dir / LOG_START_FILE
        try:
            saved = int(path.read_text().strip())
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as e:
            logger.warning("%s: ignoring %s: %s", local.name, path, e)
            return False
        with self._lock:
            if self._status.offline or saved <= offsets.start or saved > offsets.end:
                return False  # older than what retention or truncation did since, or the log no longer has it
            self._move_start(saved)
        logger.info("%s: log start offset %d restored (DeleteRecords)", local.name, saved)
        return True

    def _move_start(self, offset: int) -> None:
        """Under the lock: set the start and retire whole segments entirely below it."""
        self._offsets.advance_start(offset)
        try:
            self._local.retire_below(offset, self._clock())
        except OSError as e:
            raise self._status.storage_failure("deleting records", e) from e
        self._epochs.truncate_from_start(offset)
