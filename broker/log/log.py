"""A partition's log: a directory of segments ordered by base offset (paper 3.1).

Appends go to the last (active) segment; reads find the segment by binary search on base
offsets, then the batch through the segment's sparse offset index. A flush fsyncs outside the
append lock so the event loop is never stuck behind the disk. Consumers see only flushed data
unless the config says otherwise.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ferry.broker.log.append_info import AppendInfo
from ferry.broker.log.leader_epoch_cache import LeaderEpochFileCache
from ferry.broker.log.log_append import LogAppendBatch
from ferry.broker.log.log_flush import LogFlush
from ferry.broker.log.log_offline import LogOffline
from ferry.broker.log.log_recovery import LogRecovery
from ferry.broker.log.log_replication import LogReplication
from ferry.broker.log.log_retention import LogRetention
from ferry.broker.log.log_segment import (
    LogSegment,
)
from ferry.broker.log.log_transactions import LogTransactions
from ferry.broker.log.producer_state import ProducerStateManager
from ferry.wire.log_config import LogConfig
from ferry.wire.record.compression import PRODUCER
from ferry.wire.record.control_batch import control_type
from ferry.wire.record.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    LogOffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from ferry.wire.record.recompress import recompress_batches
from ferry.wire.record.record_batch import CONTROL_MASK, RecordBatchHeader, validate_batches

logger = logging.getLogger("ferry.log")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class FetchSlice:
    """Whole batches in one segment file, for ``os.sendfile(sock, fd, position, size)``.

    The fd belongs to the log: do not close it. It stays valid at least
    ``file_delete_delay_ms`` after retention removes the segment.
    """

    fd: int
    position: int
    size: int
    first_offset: int  # base offset of the first batch (may be below the offset asked for)

    def read_bytes(self) -> bytes:
        """The slice's bytes (for tests and callers that cannot sendfile)."""
        return os.pread(self.fd, self.size, self.position)


class Log(LogAppendBatch, LogFlush, LogRecovery, LogRetention, LogReplication, LogOffline, LogTransactions):
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
        self.config = config if config is not None else LogConfig()
        self._clock = now_ms
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._listeners: list[Callable[[Log], None]] = []
        self.flush_requested: Callable[[Log], None] | None = None  # set by LogManager
        self.io_failed: Callable[[Log, str, OSError], None] | None = None  # set by LogManager (log_offline.py)
        self.offline = False  # the directory failed: nothing touches the files any more (log_offline.py)
        self.producer_state = ProducerStateManager()
        self._appended_messages = 0
        self._snapshot_updates = -1
        self._flushed_messages = 0
        self._first_unflushed_ms: int | None = None
        self._dir_dirty = False
        self._closed = False
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.flushed_offset = 0
        # None: unreplicated, no bound beyond flushing (see high_watermark); set by replication
        self.replication_hw: int | None = None
        self.leader_epoch_cache: LeaderEpochFileCache
        self._load(recovery_point)
        if replication_hw is not None:
            self.replication_hw = min(max(replication_hw, self.log_start_offset), self.log_end_offset)

    # -- properties ------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """The end of what a fetch may read (exclusive): flushed data (or all appended data with
        consumers.see.unflushed), and no further than the replication high watermark when there is one."""
        end = self.log_end_offset if self.config.consumers_see_unflushed else self.flushed_offset
        hw = self.replication_hw
        return end if hw is None or hw > end else hw

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._appended_messages - self._flushed_messages

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config
            for s in self._segments:
                s.index_interval_bytes = config.index_interval_bytes

    def add_high_watermark_listener(self, callback: Callable[[Log], None]) -> None:
        """``callback(log)`` runs (in the thread that moved it) whenever high_watermark grows."""
        with self._lock:
            self._listeners.append(callback)

    def remove_high_watermark_listener(self, callback: Callable[[Log], None]) -> None:
        with self._lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def _notify(self) -> None:
        for cb in list(self._listeners):
            try:
                cb(self)
            except Exception:
                logger.exception("high watermark listener of %s failed", self.name)

    # -- loading ---------------------------------------------------------------------------------

    # -- append ----------------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, leader_epoch: int = -1, allow: int = 0) -> AppendInfo:
        """Validate, sequence-check, assign offsets and write one produce payload.

        ``leader_epoch`` >= 0 (a replicated partition's leader): every batch is written with it as
        partitionLeaderEpoch and the epoch cache learns where the epoch starts. Raises
        CorruptRecordError, InvalidRecordError, RecordTooLargeError, OutOfOrderSequenceError,
        InvalidProducerEpochError or FencedLeaderEpochError (an epoch older than the log's latest);
        nothing is written then. KafkaStorageError when the directory fails (or failed before): the
        bytes of a failed write are cut off and the log is offline (log_offline.py). ``allow``: the
        transactional/control attribute bits accepted (a transactional produce, a marker).
        """
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        config = self.config
        try:
            mv, headers = self._validated(mv, config, allow)
        except RecordTooLargeError:
            written = self._written_before(mv)
            if written is None:
                raise
            return written
        if len(headers) == 1:  # a producer's usual request: one batch
            h = headers[0]
            count = h.records_count
            span = h.last_offset_delta + 1
            idempotent = h.producer_id >= 0
        else:
            count = 0
            span = 0
            idempotent = False
            for h in headers:
                count += h.records_count
                span += h.last_offset_delta + 1
                if h.producer_id >= 0:
                    idempotent = True
        with self._lock:
            new_epoch = self._writable(leader_epoch)
            cache = self.leader_epoch_cache
            state = self.producer_state
            if idempotent:
                dup = state.find_duplicate(headers)
                if dup is not None:
                    return AppendInfo(dup.first_offset, dup.last_offset, duplicate=True)
                state.check(headers)
            first = self.log_end_offset
            try:
                if new_epoch:
                    cache.assign(leader_epoch, first)  # durable no later than the epoch's data (flush)
                seg = self._segments[-1]
                now = self._clock()
                if seg.should_roll(len(mv), first + span - 1, now, config):
                    seg = self._roll(now)
                append_time = now if config.log_append_time else None
                next_offset = seg.append(mv, headers, first, append_time, leader_epoch)
            except OSError as e:  # nothing counted; a partial write was cut off (LogSegment._write)
                raise self.storage_failure("append", e) from e
            if idempotent:
                offset = first
                pos = 0
                for h in headers:
                    if h.producer_id >= 0:
                        state.update(h, offset, now, control_type(mv, pos) if h.is_control else -1)
                    offset += h.last_offset_delta + 1
                    pos += h.size
            want_flush = self._count_appended(next_offset, count, now)
        self._after_append(want_flush)
        return AppendInfo(first, next_offset - 1, False, -1 if append_time is None else append_time)  # positional

    @staticmethod
    def _validated(mv: memoryview, config: LogConfig, allow: int = 0) -> tuple[memoryview, list[RecordBatchHeader]]:
        """The payload as it will be written (converted to the topic's codec if it has one; never a marker)
        and its headers."""
        if len(mv) > config.segment_bytes:
            raise RecordTooLargeError(f"record set of {len(mv)} bytes exceeds segment.bytes {config.segment_bytes}")
        headers = validate_batches(mv, config.max_message_bytes, allow)
        if config.compression != PRODUCER and not allow & CONTROL_MASK:
            converted = recompress_batches(mv, headers, config.compression, config.compression_level,
                                           config.max_message_bytes)
            if converted is not None:
                mv = memoryview(converted[0])
                headers = converted[1]
                if len(mv) > config.segment_bytes:
                    raise RecordTooLargeError(
                        f"record set of {len(mv)} bytes as {config.compression_type} exceeds segment.bytes "
                        f"{config.segment_bytes}")
        return mv, headers

    def _written_before(self, mv: memoryview) -> AppendInfo | None:
        """A too-large idempotent payload that repeats an append already made (the size limit was lowered
        since, or conversion grew it) is answered as the duplicate it is, not refused: a producer whose
        first attempt had an unknown outcome then learns the truth, and a refusal always means "not
        written" (the mirror relies on it to split batches safely)."""
        try:
            headers = validate_batches(mv)
        except (CorruptRecordError, InvalidRecordError, RecordTooLargeError):
            return None
        if not any(h.producer_id >= 0 for h in headers):
            return None
        with self._lock:
            dup = self.producer_state.find_duplicate(headers)
        return None if dup is None else AppendInfo(dup.first_offset, dup.last_offset, duplicate=True)

    def _roll(self, now: int) -> LogSegment:
        """Start a new active segment at the log end offset."""
        old = self._segments[-1]
        old.on_become_inactive()
        new = LogSegment(self.dir, self.log_end_offset, self.config, now)
        if new.size:
            new.close()
            raise StorageError(f"{new.log_path} already exists with {new.size} bytes; refusing to roll onto it")
        new.on_become_active()
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._dir_dirty = True
        logger.debug("%s: rolled segment %d", self.name, new.base_offset)
        return new

    # -- read ------------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> FetchSlice | None:
        """Whole batches from the one containing ``offset``, ending before ``upper_bound``
        (default: the high watermark), at most ``max_bytes`` unless the first batch alone is
        larger. None when there is nothing to read yet. LogOffsetOutOfRangeError outside
        [log_start_offset, log_end_offset]; KafkaStorageError once the directory is offline."""
        with self._lock:
            if self.offline:
                raise self.offline_error()
            if offset < self.log_start_offset or offset > self.log_end_offset:
                raise LogOffsetOutOfRangeError(
                    f"offset {offset} is out of range [{self.log_start_offset}, {self.log_end_offset}] of {self.name}"
                )
            bound = self.high_watermark if upper_bound is None else min(upper_bound, self.log_end_offset)
            if offset >= bound:
                return None
            try:
                i = max(0, bisect.bisect_right(self._bases, offset) - 1)
                segments = self._segments
                while i < len(segments):
                    seg = segments[i]
                    if seg.base_offset >= bound:
                        return None
                    found = seg.find_batch(offset)
                    if found is None:
                        i += 1
                        continue
                    pos, h = found
                    if h.next_offset > bound:
                        return None
                    if bound >= seg.next_offset:
                        end = seg.size
                    else:
                        bound_batch = seg.find_batch(bound)
                        end = bound_batch[0] if bound_batch is not None else seg.size
                    if end - pos > max_bytes:
                        end = max(pos + h.size, seg.boundary_before(pos + max(max_bytes, 0), pos))
                    return FetchSlice(seg.fd, pos, end - pos, h.base_offset)
                return None
            except OSError as e:
                raise self.storage_failure("read", e) from e

    def offset_for_timestamp(self, timestamp_ms: int, upper_bound: int | None = None) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch with max_timestamp >= ``timestamp_ms``
        below ``upper_bound`` (default: the high watermark), or None."""
        with self._lock:
            bound = self.high_watermark if upper_bound is None else min(upper_bound, self.log_end_offset)
            for seg in self._segments:
                if seg.base_offset >= bound:
                    return None
                if seg.max_timestamp >= timestamp_ms:
                    return seg.find_timestamp(timestamp_ms, bound)
            return None

    # -- flush -----------------------------------------------------------------------------------

    # -- retention -------------------------------------------------------------------------------

    # -- close -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, save the producer state, trim the indexes and close every file (an offline log: close only)."""
        if self._closed:
            return
        try:
            self.flush()
        except KafkaStorageError:
            pass  # reported once; the log is offline now and closes without writing
        with self._flush_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            if self.offline:
                self._close_offline()
                return
            try:
                self.producer_state.write_snapshot(self.dir, self.log_end_offset)
                self._segments[-1].on_become_inactive()
                for seg in self._segments:
                    seg.flush()
                self.leader_epoch_cache.flush()
            except OSError as e:
                self.storage_failure("close", e)
                self._close_offline()
                return
            for seg in self._segments:
                seg.close()
            self._delete_pending(None)

    def __repr__(self) -> str:
        return f"Log({self.name}, [{self.log_start_offset}, {self.log_end_offset}), flushed={self.flushed_offset})"
