"""Flushing a partition's log: after N messages or T ms (paper 3.1), fsync of data, indexes, leader epochs and
directory. Consumers see only flushed data where that setting applies, so a flush may move the high watermark."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ferry.broker.log.leader_epoch_cache import LeaderEpochFileCache
from ferry.broker.log.local_log import LocalLog
from ferry.broker.log.log_offline import LogStatus
from ferry.broker.log.log_offsets import LogOffsets
from ferry.wire.bucket_histogram import BucketHistogram

# Every log's flush times, in seconds (Kafka's LogFlushStats.logFlushTimer: one for the process too); observed
# from the flushing thread, read by the broker's metrics (BrokerCollector).
LOG_FLUSH_TIME = BucketHistogram()
_FLUSH_TIME_LOCK = threading.Lock()  # flushes of different logs run on several threads at once


class LogDurability:
    """Counts what is not yet flushed, says when a flush is due and runs it: the fsyncs outside the append
    lock, so the event loop is never stuck behind the disk."""

    def __init__(self, local: LocalLog, offsets: LogOffsets, epochs: LeaderEpochFileCache, status: LogStatus,
                 lock: threading.RLock, flush_lock: threading.Lock, clock: Callable[[], int],
                 notify: Callable[[], None]) -> None:
        self._local = local
        self._offsets = offsets
        self._epochs = epochs
        self._status = status
        self._lock = lock
        self._flush_lock = flush_lock
        self._clock = clock
        self._notify = notify  # the high watermark grew
        self._appended_messages = 0
        self._flushed_messages = 0
        self._first_unflushed_ms: int | None = None

    @property
    def unflushed_messages(self) -> int:
        return self._appended_messages - self._flushed_messages

    def count_appended(self, messages: int, now: int) -> bool:
        """Under the append lock, after a write: when the unflushed data began, the messages not yet flushed.
        True when flush.messages asks for a flush (every append path counts the same way)."""
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now
        self._appended_messages += messages
        return self._appended_messages - self._flushed_messages >= self._local.config.flush_interval_messages

    def truncated(self) -> None:
        """After a truncation: nothing is unflushed once the flushed offset reaches the new end."""
        if self._offsets.flushed >= self._offsets.end:
            self._flushed_messages = self._appended_messages
            self._first_unflushed_ms = None

    def needs_flush(self, now_ms: int | None = None) -> bool:
        """flush.messages reached, or the oldest unflushed append is flush.ms old."""
        first = self._first_unflushed_ms
        if first is None or self._status.closed or self._status.offline:
            return False
        config = self._local.config
        if self._appended_messages - self._flushed_messages >= config.flush_interval_messages:
            return True
        now = self._clock() if now_ms is None else now_ms
        return now - first >= config.flush_interval_ms

    def flush(self, offset: int | None = None) -> int:
        """fsync everything appended so far (returns at once if ``offset`` is already flushed).

        The append lock is held only to take a snapshot; the fsyncs run without it.
        Returns the flushed offset. A failed fsync takes the log offline (KafkaStorageError) and
        flushed_offset never moves again on this object: Linux may have dropped the pages whose
        write-back failed and report the next fsync as a success, so only a new open, which
        verifies what the disk holds, may call that data durable (log_offline.py).
        """
        offsets, local, status = self._offsets, self._local, self._status
        with self._flush_lock:
            with self._lock:
                if status.closed:
                    return offsets.flushed
                if status.offline:
                    raise status.offline_error()
                target = offsets.end
                if offsets.flushed >= (target if offset is None else min(offset, target)):
                    return offsets.flushed
                segments = local.segments_from(offsets.flushed)
                active = local.segments[-1]
                messages = self._appended_messages
                dir_dirty, local.dir_dirty = local.dir_dirty, False
                first_unflushed = self._first_unflushed_ms
                self._first_unflushed_ms = None
            began = time.monotonic()
            try:
                for seg in segments:
                    seg.flush(indexes=seg is not active)
                self._epochs.flush()  # the epochs of what is now durable are durable too
                if dir_dirty:
                    local.fsync_dir()
            except OSError as e:
                raise status.storage_failure("flush", e) from e
            except BaseException:
                with self._lock:
                    local.dir_dirty = local.dir_dirty or dir_dirty
                    if self._first_unflushed_ms is None:
                        self._first_unflushed_ms = first_unflushed
                raise
            with _FLUSH_TIME_LOCK:
                LOG_FLUSH_TIME.observe(time.monotonic() - began)
            with self._lock:
                if status.offline:  # the directory failed meanwhile: never move flushed_offset on an offline log
                    raise status.offline_error()
                before = offsets.high_watermark
                offsets.flushed = max(offsets.flushed, target)
                self._flushed_messages = max(self._flushed_messages, messages)
                if offsets.end > offsets.flushed and self._first_unflushed_ms is None:
                    self._first_unflushed_ms = self._clock()
                moved = offsets.high_watermark != before
            if moved:
                self._notify()
            return offsets.flushed
