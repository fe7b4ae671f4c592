"""Writing batches to a segment file, and Log.append for the one batch a producer's request usually carries.

``write_batches`` is the native writer (broker/log/_append_native.pyx, the native part ``append``) when it
is built, else ``write_batches_py``, its pure-Python twin: the same bytes at the same place (tests compare the
files). ``FERRY_NATIVE_DISABLE=append`` forces the Python one.
"""

from __future__ import annotations

import os
from typing import Any

from ferry.broker.log.append_info import AppendInfo
from ferry.wire import native
from ferry.wire.record.compression import PRODUCER
from ferry.wire.record.errors import FencedLeaderEpochError, StorageError
from ferry.wire.record.record_batch import (
    BASE_OFFSET_STRUCT,
    EPOCH_PREFIX_STRUCT,
    LOG_OVERHEAD,
    RecordBatchHeader,
)

try:
    _IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))
except (ValueError, OSError, AttributeError):
    _IOV_MAX = 1024


def pwrite_all(fd: int, pieces: list, position: int) -> None:
    """Write every buffer in ``pieces`` (bytes or byte-format memoryviews) at ``position`` with as few
    pwritev() calls as possible: usually one, which writes everything."""
    if len(pieces) <= _IOV_MAX:
        total = 0
        for p in pieces:
            total += len(p)
        written = os.pwritev(fd, pieces, position)
        if written == total:
            return
    views = [memoryview(p).cast("B") for p in pieces]
    i = 0
    while i < len(views):
        chunk = views[i : i + _IOV_MAX]
        written = os.pwritev(fd, chunk, position)
        position += written
        # drop what was fully written, keep the unwritten rest of a partially written buffer
        while written and i < len(views):
            n = len(views[i])
            if written >= n:
                written -= n
                i += 1
            else:
                views[i] = views[i][written:]
                written = 0
        while i < len(views) and len(views[i]) == 0:
            i += 1


def write_batches_py(fd: int, items: list, leader_epoch: int, position: int) -> None:
    """Write the batches ``items`` — (buffer, position in it, size, baseOffset, batchLength) each — one after the
    other at ``position`` of ``fd``, each with its baseOffset (and partitionLeaderEpoch ``leader_epoch`` when
    >= 0): all of it or OSError. At most 512 batches."""
    if len(items) > 512:
        raise ValueError(f"{len(items)} batches in one write; at most 512")
    pieces: list = []
    for buf, pos, size, offset, batch_length in items:
        mv = memoryview(buf)
        n = 16 if leader_epoch >= 0 else 8
        if pos < 0 or pos + size > len(mv) or size < n:
            raise ValueError(f"batch of {size} bytes at {pos} is outside the {len(mv)}-byte buffer")
        if leader_epoch >= 0:
            pieces += (EPOCH_PREFIX_STRUCT.pack(offset, batch_length, leader_epoch), mv[pos + 16:pos + size])
        else:
            pieces += (BASE_OFFSET_STRUCT.pack(offset), mv[pos + 8:pos + size])
    if pieces:
        pwrite_all(fd, pieces, position)


_new = tuple.__new__
_append_part = native.load("append")
native_write_batches = _append_part.write_batches if _append_part is not None else None
write_batches = native_write_batches if native_write_batches is not None else write_batches_py


class LogAppendBatch:
    """Log.append_batch (a part of Log: its attributes are set in Log.__init__)."""

    def _writable(self: Any, leader_epoch: int) -> bool:
        """Under the append lock: refuse a closed or offline log and a fenced (older) leader epoch; True when
        ``leader_epoch`` is a new one that the append must record. Every leader append checks this way."""
        if self._closed:
            raise StorageError(f"log {self.name} is closed")
        if self.offline:
            raise self.offline_error()
        latest = self.leader_epoch_cache.latest_epoch
        new_epoch = leader_epoch != latest and leader_epoch >= 0
        if new_epoch and leader_epoch < latest:
            raise FencedLeaderEpochError(f"leader epoch {leader_epoch} is older than {latest} in {self.name}")
        return new_epoch

    def append_batch(self: Any, buf: Any, pos: int, h: RecordBatchHeader, leader_epoch: int = -1) -> AppendInfo:
        """Log.append of the one batch at ``pos`` in ``buf`` whose header ``h`` produce_parse read and checked
        (framing, magic, counts, attributes, CRC-32C): the same checks in the same order, the same bytes
        written and the same accounting, without the copies and loops. A batch that needs more than that (over
        a size limit, a topic codec to convert to, LogAppendTime) goes to append(), which decides."""
        config = self.config
        size = h.batch_length + LOG_OVERHEAD
        if (size > config.max_message_bytes or size > config.segment_bytes or config.compression != PRODUCER
                or config.log_append_time):
            return self.append(memoryview(buf)[pos:pos + size], leader_epoch)
        with self._lock:
            new_epoch = self._writable(leader_epoch)
            cache = self.leader_epoch_cache
            idempotent = h.producer_id >= 0
            if idempotent:
                headers = [h]
                dup = self.producer_state.find_duplicate(headers)
                if dup is not None:
                    return AppendInfo(dup.first_offset, dup.last_offset, duplicate=True)
                self.producer_state.check(headers)
            first = self.log_end_offset
            try:
                if new_epoch:
                    cache.assign(leader_epoch, first)  # durable no later than the epoch's data (flush)
                seg = self._segments[-1]
                now = self._clock()
                if seg.should_roll(size, first + h.last_offset_delta, now, config):
                    seg = self._roll(now)
                next_offset = seg.append_batches([(buf, pos, h)], first, leader_epoch)
            except OSError as e:  # nothing counted; a partial write was cut off (LogSegment.append_batches)
                raise self.storage_failure("append", e) from e
            if idempotent:
                self.producer_state.update(h, first, now, -1)  # never a control batch: produce_parse refuses them
            want_flush = self._count_appended(next_offset, h.records_count, now)
        self._after_append(want_flush)
        return _new(AppendInfo, (first, next_offset - 1, False, -1))  # a NamedTuple's own __new__ costs more

    def append_batches(self: Any, items: list, leader_epoch: int = -1) -> list[AppendInfo] | None:
        """append_batch of several batches of producers without a producer id (no sequence to check), each
        (buffer, position, header) as produce_parse gave it, in order, written with one write: a pipelining
        producer's burst of one-message requests costs one pwritev, not one each. None (nothing done) when
        any of them needs more than append_batch does or the group would not fit the active segment: the
        caller appends them one by one then, which decides exactly as before."""
        config = self.config
        limit = min(config.max_message_bytes, config.segment_bytes)
        if config.compression != PRODUCER or config.log_append_time:
            return None
        total = span = count = 0
        for _, _, h in items:
            size = h.batch_length + LOG_OVERHEAD
            if size > limit or h.producer_id >= 0:
                return None
            total += size
            span += h.last_offset_delta + 1
            count += h.records_count
        with self._lock:
            if self._closed or self.offline:
                return None
            cache = self.leader_epoch_cache
            if leader_epoch != cache.latest_epoch and leader_epoch >= 0:
                return None  # a new (or fenced) epoch: append_batch records or refuses it
            first = self.log_end_offset
            seg = self._segments[-1]
            now = self._clock()
            n = len(items)  # at most one index entry each: an index that could fill up mid-group rolls one by one
            oi, ti = seg.offset_index, seg.time_index
            if (seg.size + total > config.segment_bytes or oi.entries + n >= oi.max_entries
                    or ti.entries + n >= ti.max_entries or seg.should_roll(total, first + span - 1, now, config)):
                return None
            try:
                next_offset = seg.append_batches(items, first, leader_epoch)
            except OSError as e:  # nothing counted; a partial write was cut off (LogSegment.append_batches)
                raise self.storage_failure("append", e) from e
            want_flush = self._count_appended(next_offset, count, now)
        self._after_append(want_flush)
        infos = []
        for _, _, h in items:
            last = first + h.last_offset_delta
            infos.append(_new(AppendInfo, (first, last, False, -1)))
            first = last + 1
        return infos
