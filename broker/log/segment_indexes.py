"""A segment's two sparse indexes and what decides their entries: an entry every ``index_interval_bytes`` of
log, the offset index by offset, the time index by the largest timestamp so far (Kafka's LogSegment keeps the
same counters). Batch headers read from the segment file are here too: the indexes lead a read to a position,
the headers finish it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ferry.broker.log.offset_index import OffsetIndex
from ferry.broker.log.time_index import TimeIndex
from ferry.wire.record.record_batch import BATCH_HEADER_SIZE, HEADER_STRUCT, LOG_OVERHEAD, RecordBatchHeader

INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
_SCAN_CHUNK = 16 * 1024


def read_header(fd: int, position: int) -> RecordBatchHeader | None:
    data = os.pread(fd, BATCH_HEADER_SIZE, position)
    if len(data) < BATCH_HEADER_SIZE:
        return None
    return RecordBatchHeader(*HEADER_STRUCT.unpack(data))


def iter_headers(fd: int, start: int, end: int) -> Iterator[tuple[int, RecordBatchHeader]]:
    """(position, header) of each batch of the file ``fd`` from ``start`` (a batch boundary) up to ``end``.

    Reads headers in small chunks; stops quietly at a header that is short or inconsistent
    (recovery, not reads, deals with damaged data).
    """
    pos = start
    unpack = HEADER_STRUCT.unpack_from
    while end - pos >= BATCH_HEADER_SIZE:
        chunk = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
        chunk_start = pos
        used = 0
        while len(chunk) - used >= BATCH_HEADER_SIZE:
            h = RecordBatchHeader(*unpack(chunk, used))
            if h.magic != 2 or h.batch_length < BATCH_HEADER_SIZE - 12 or pos + h.size > end:
                return
            yield pos, h
            pos += h.size
            used = pos - chunk_start
        if used == 0:
            return


class SegmentIndexes:
    """The offset and time index of one segment, the largest timestamp seen and the bytes since the last entry.

    Entries are appended in memory; ``backlog`` says some wait to be written, which the segment does before its
    next batch (a full disk then fails that append with nothing of it written)."""

    def __init__(self, directory: Path, name: str, base_offset: int, max_index_bytes: int,
                 index_interval_bytes: int, suffix: str = "") -> None:
        self.base_offset = base_offset
        self.offset_index = OffsetIndex(directory / (name + INDEX_SUFFIX + suffix), base_offset, max_index_bytes)
        self.time_index = TimeIndex(directory / (name + TIME_INDEX_SUFFIX + suffix), base_offset, max_index_bytes)
        self.index_interval_bytes = index_interval_bytes
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        self.backlog = False

    def appended(self, headers: list[RecordBatchHeader], position: int, first_offset: int | None,
                 append_time: int | None) -> tuple[int, int]:
        """Account for batches just written at ``position`` with offsets from ``first_offset`` (each batch's
        maxTimestamp, or ``append_time`` for LogAppendTime); ``first_offset`` None: the batches carry their
        offsets already, possibly with gaps between them (a replica of a compacted log, the cleaner's output).
        Returns (the end position, the next offset)."""
        offset = headers[0].base_offset if first_offset is None else first_offset
        pos = position
        interval = self.index_interval_bytes
        max_ts, max_ts_offset = self.max_timestamp, self.offset_of_max_timestamp
        since = self.bytes_since_last_index_entry
        due = []  # (offset, position, largest timestamp so far, its offset) where an entry is due
        for h in headers:
            if first_offset is None:
                offset = h.base_offset
            size = h.batch_length + LOG_OVERHEAD
            ts = h.max_timestamp if append_time is None else append_time
            if ts > max_ts:
                max_ts, max_ts_offset = ts, offset
            if since > interval:
                due.append((offset, pos, max_ts, max_ts_offset))
                since = 0
            since += size
            offset += h.last_offset_delta + 1
            pos += size
        # the entries of a whole append at once (an 8 MiB copied answer has ~800 batches): one pack each
        if due:
            self.offset_index.append_many(due)
            self.time_index.maybe_append_many(due)
            if self.offset_index.backlog or self.time_index.backlog:
                self.backlog = True
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        self.bytes_since_last_index_entry = since
        return pos, offset

    def loaded(self, max_timestamp: int, offset_of_max_timestamp: int, bytes_since_last_entry: int) -> None:
        """The counters as a scan of a reopened segment found them (its entries were trusted)."""
        self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max_timestamp
        self.bytes_since_last_index_entry = bytes_since_last_entry

    def recovered(self, position: int, base_offset: int, max_timestamp: int, size: int) -> None:
        """Index one batch found by recovery, writing entries as they come."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._add_entry(position, base_offset)
            if self.backlog:
                self.write_pending()
        self.bytes_since_last_index_entry += size

    def _add_entry(self, position: int, base_offset: int) -> None:
        oi, ti = self.offset_index, self.time_index
        if not oi.is_full:
            oi.append(base_offset, position)
        ti.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.bytes_since_last_index_entry = 0
        if oi.backlog or ti.backlog:
            self.backlog = True

    def write_pending(self) -> None:
        """Write the entries waiting in memory (abstract_index.py)."""
        self._both("write_pending")

    def reset(self) -> None:
        """Empty, for a rebuild from the batches (recovery)."""
        self.offset_index.reset()
        self.time_index.reset()
        self.backlog = False
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_last_index_entry = 0

    def truncate_to(self, fd: int, end_offset: int, end_position: int) -> None:
        """Drop the entries at or after ``end_offset`` (the file now ends at ``end_position``); the largest
        timestamp is found again from the last entries and the batches after them."""
        self.offset_index.truncate_to(end_offset)
        self.time_index.truncate_to(end_offset)
        max_ts, max_ts_offset = self.time_index.last_entry()
        _, last_pos = self.offset_index.last_entry()
        for _, batch in iter_headers(fd, last_pos, end_position):
            if batch.max_timestamp > max_ts:
                max_ts, max_ts_offset = batch.max_timestamp, batch.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        self.bytes_since_last_index_entry = end_position - last_pos

    def on_become_inactive(self) -> None:
        """Record the final largest timestamp and write every entry: the files hold exactly their entries."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self._both("trim")

    def flush(self) -> None:
        self._both("flush")

    def _both(self, step: str) -> None:
        """Run ``step`` (write_pending, trim or flush: each writes what waits in memory) on both indexes."""
        for index in (self.offset_index, self.time_index):
            getattr(index, step)()
        self.backlog = False

    def mark_deleted(self) -> None:
        for index in (self.offset_index, self.time_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def rename(self, directory: Path, name: str, suffix: str) -> None:
        """Both files to ``<name>.index<suffix>`` and ``<name>.timeindex<suffix>`` (the cleaner's swap)."""
        self.offset_index.rename(directory / (name + INDEX_SUFFIX + suffix))
        self.time_index.rename(directory / (name + TIME_INDEX_SUFFIX + suffix))

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        self.offset_index.delete()
        self.time_index.delete()
