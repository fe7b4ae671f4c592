"""Flushing a partition's log: after N messages or T ms (paper 3.1), fsync of data, indexes and directory; consumers see only flushed data where that setting applies."""

from __future__ import annotations

import bisect

from ferry.wire.atomic_file import fsync_dir


class LogFlush:
    """Flushing a partition's log: after N messages or T ms (paper 3.1), fsync of data, indexes and directory; consumers see only flushed data where that setting applies. (a part of Log)."""

    def _count_appended(self, next_offset: int, messages: int, now: int) -> bool:
        """Under the append lock, after a write: the new log end, when the unflushed data began, the messages
        not yet flushed. True when flush.messages asks for a flush (every append path counts the same way)."""
        self.log_end_offset = next_offset
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now
        self._appended_messages += messages
        return self._appended_messages - self._flushed_messages >= self.config.flush_interval_messages

    def _after_append(self, want_flush: bool) -> None:
        """Outside the lock: wake the readers that may see unflushed data, ask for the flush it wants."""
        if self.config.consumers_see_unflushed:
            self._notify()
        if want_flush and self.flush_requested is not None:
            self.flush_requested(self)

    def needs_flush(self, now_ms: int | None = None) -> bool:
        """flush.messages reached, or the oldest unflushed append is flush.ms old."""
        first = self._first_unflushed_ms
        if first is None or self._closed or self.offline:
            return False
        if self._appended_messages - self._flushed_messages >= self.config.flush_interval_messages:
            return True
        now = self._clock() if now_ms is None else now_ms
        return now - first >= self.config.flush_interval_ms

    def maybe_flush(self) -> bool:
        if self.needs_flush():
            self.flush()
            return True
        return False

    def flush(self, offset: int | None = None) -> int:
        """fsync everything appended so far (returns at once if ``offset`` is already flushed).

        The append lock is held only to take a snapshot; the fsyncs run without it.
        Returns the flushed offset. A failed fsync takes the log offline (KafkaStorageError) and
        flushed_offset never moves again on this object: Linux may have dropped the pages whose
        write-back failed and report the next fsync as a success, so only a new open, which
        verifies what the disk holds, may call that data durable (log_offline.py).
        """
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return self.flushed_offset
                if self.offline:
                    raise self.offline_error()
                target = self.log_end_offset
                if self.flushed_offset >= (target if offset is None else min(offset, target)):
                    return self.flushed_offset
                i = max(0, bisect.bisect_right(self._bases, self.flushed_offset) - 1)
                segments = self._segments[i:]
                active = self._segments[-1]
                messages = self._appended_messages
                dir_dirty, self._dir_dirty = self._dir_dirty, False
                first_unflushed = self._first_unflushed_ms
                self._first_unflushed_ms = None
            try:
                for seg in segments:
                    seg.flush(indexes=seg is not active)
                self.leader_epoch_cache.flush()  # the epochs of what is now durable are durable too
                if dir_dirty:
                    self._fsync_dir()
            except OSError as e:
                raise self.storage_failure("flush", e) from e
            except BaseException:
                with self._lock:
                    self._dir_dirty = self._dir_dirty or dir_dirty
                    if self._first_unflushed_ms is None:
                        self._first_unflushed_ms = first_unflushed
                raise
            with self._lock:
                if self.offline:  # the directory failed meanwhile: never move flushed_offset on an offline log
                    raise self.offline_error()
                before = self.high_watermark
                self.flushed_offset = max(self.flushed_offset, target)
                self._flushed_messages = max(self._flushed_messages, messages)
                if self.log_end_offset > self.flushed_offset and self._first_unflushed_ms is None:
                    self._first_unflushed_ms = self._clock()
                moved = self.high_watermark != before
            if moved:
                self._notify()
            return self.flushed_offset

    def _fsync_dir(self) -> None:
        fsync_dir(self.dir)
