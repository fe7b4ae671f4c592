"""One segment of a partition's log: ``<base offset, 20 digits>.log`` plus its ``.index`` and
``.timeindex``.

The log file holds record batches exactly as producers sent them, except for the rewritten
baseOffset. Reads hand out (fd, position, size) for ``os.sendfile``; nothing is cached in the
broker's memory.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c
from aiokafka.record._crecords.default_records import DefaultRecordBatch

from ferry.broker.log.log_append import pwrite_all, write_batches
from ferry.broker.log.offset_index import MAX_RELATIVE_OFFSET, OffsetIndex
from ferry.broker.log.segment_recovery import SegmentRecovery
from ferry.broker.log.time_index import TimeIndex
from ferry.wire.log_config import LogConfig
from ferry.wire.record.record_batch import (
    ATTRIBUTES_POS,
    BASE_OFFSET_STRUCT,
    BATCH_HEADER_SIZE,
    CRC_POS,
    EPOCH_PREFIX_STRUCT,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_POS,
    PARTITION_LEADER_EPOCH_POS,
    PARTITION_LEADER_EPOCH_STRUCT,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
)

logger = logging.getLogger("ferry.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
_SCAN_CHUNK = 16 * 1024
def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")


def _stamped_header(buf: memoryview, pos: int, size: int, offset: int, attributes: int, append_time: int,
                    leader_epoch: int = -1) -> bytearray:
    """The 61-byte header of the batch at ``pos`` with its new baseOffset (and partitionLeaderEpoch when
    ``leader_epoch`` >= 0), marked LogAppendTime with maxTimestamp = ``append_time``, and the CRC-32C
    recomputed (it covers attributes .. end)."""
    head = bytearray(buf[pos : pos + BATCH_HEADER_SIZE])
    BASE_OFFSET_STRUCT.pack_into(head, 0, offset)
    if leader_epoch >= 0:
        PARTITION_LEADER_EPOCH_STRUCT.pack_into(head, PARTITION_LEADER_EPOCH_POS, leader_epoch)
    _ATTRIBUTES.pack_into(head, ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
    _MAX_TIMESTAMP.pack_into(head, MAX_TIMESTAMP_POS, append_time)
    crc = crc32c.crc32c(buf[pos + BATCH_HEADER_SIZE : pos + size], crc32c.crc32c(head[ATTRIBUTES_POS:]))
    _CRC.pack_into(head, CRC_POS, crc)
    return head


class LogSegment(SegmentRecovery):
    def __init__(self, directory: Path, base_offset: int, config: LogConfig, now_ms: int) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        name = segment_name(base_offset)
        self.log_path = self.directory / (name + LOG_SUFFIX)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self.size = os.fstat(self.fd).st_size
            self.offset_index = OffsetIndex(self.directory / (name + INDEX_SUFFIX), base_offset, config.max_index_bytes)
            self.time_index = TimeIndex(self.directory / (name + TIME_INDEX_SUFFIX), base_offset, config.max_index_bytes)
        except BaseException:
            os.close(self.fd)
            raise
        self.index_interval_bytes = config.index_interval_bytes
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        self._index_backlog = False  # index entries wait in memory to be written before the next batch
        self.created_ms = now_ms
        self.closed = False

    # -- writing ---------------------------------------------------------------------------------

    def append(self, buf: memoryview, headers: list[RecordBatchHeader], first_offset: int,
               append_time: int | None = None, leader_epoch: int = -1) -> int:
        """Write validated batches at the end with consecutive offsets from ``first_offset``.

        The caller's buffer is not modified: each batch goes out as its new 8-byte baseOffset
        followed by the rest of its bytes, in one pwritev(). With ``leader_epoch`` >= 0 the first 16
        bytes (baseOffset, batchLength, partitionLeaderEpoch; outside the CRC) are written instead.
        With ``append_time`` (LogAppendTime) each header is rewritten instead: the timestamp-type
        bit, maxTimestamp = append_time and the CRC-32C over them. Returns the next offset.
        """
        if len(headers) == 1 and append_time is None:
            return self._append_one(buf, headers[0], first_offset, leader_epoch)
        pieces: list = []
        offset = first_offset
        pos = 0
        for h in headers:
            size = h.batch_length + LOG_OVERHEAD
            if append_time is not None:
                pieces.append(_stamped_header(buf, pos, size, offset, h.attributes, append_time, leader_epoch))
                pieces.append(buf[pos + BATCH_HEADER_SIZE : pos + size])
            elif leader_epoch >= 0:
                pieces.append(EPOCH_PREFIX_STRUCT.pack(offset, h.batch_length, leader_epoch))
                pieces.append(buf[pos + EPOCH_PREFIX_STRUCT.size : pos + size])
            else:
                pieces.append(BASE_OFFSET_STRUCT.pack(offset))
                pieces.append(buf[pos + 8 : pos + size])
            offset += h.last_offset_delta + 1
            pos += size
        if self._index_backlog:
            self._write_index_entries()
        start = self._write(pieces)
        return self._index_appended(headers, start, first_offset, append_time)

    def _append_one(self, buf: memoryview, h: RecordBatchHeader, offset: int, leader_epoch: int) -> int:
        """append() of one batch without LogAppendTime (a producer's usual request): the same bytes written and
        the same accounting, without the loops."""
        size = h.batch_length + LOG_OVERHEAD
        if leader_epoch >= 0:
            pieces = [EPOCH_PREFIX_STRUCT.pack(offset, h.batch_length, leader_epoch), buf[16:size]]
        else:
            pieces = [BASE_OFFSET_STRUCT.pack(offset), buf[8:size]]
        if self._index_backlog:
            self._write_index_entries()
        start = self._write(pieces)
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.offset_of_max_timestamp = offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._add_index_entry(start, offset)
        self.bytes_since_last_index_entry += size
        self.size = start + size
        offset += h.last_offset_delta + 1
        self.next_offset = offset
        return offset

    def append_batches(self, items: list, offset: int, leader_epoch: int) -> int:
        """_append_one of each batch in ``items`` — (a request's buffer, the batch's position in it, its header) —
        from ``offset`` on (Log.append_batch, Log.append_batches): all written by one write_batches (native when
        built) straight from those buffers; all or nothing is counted."""
        if self._index_backlog:
            self._write_index_entries()
        start = self.size
        writes = []
        for buf, pos, h in items:
            writes.append((buf, pos, h.batch_length + LOG_OVERHEAD, offset, h.batch_length))
            offset += h.last_offset_delta + 1
        try:
            write_batches(self.fd, writes, leader_epoch, start)
        except OSError:
            self._cut_back(start)
            raise
        at = start
        for (_, _, h), (_, _, size, offset, _) in zip(items, writes, strict=True):
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self._add_index_entry(at, offset)
            self.bytes_since_last_index_entry += size
            at += size
        self.size = at
        self.next_offset = offset + h.last_offset_delta + 1
        return self.next_offset

    def append_raw(self, buf: memoryview, headers: list[RecordBatchHeader]) -> int:
        """Write batches byte for byte as they are (a follower's copy of its leader's batches: offsets,
        leader epochs and timestamps already set). Returns the next offset."""
        if self._index_backlog:
            self._write_index_entries()
        start = self._write([buf])
        return self._index_appended(headers, start, headers[0].base_offset, None)

    def _write_index_entries(self) -> None:
        """Write the index entries waiting in memory (abstract_index.py), before the next batch: a full disk
        then fails that append with nothing of it written, and every batch acknowledged stays counted."""
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self._index_backlog = False

    def _write(self, pieces: list) -> int:
        """Write ``pieces`` at the end of the file; returns where they start."""
        start = self.size
        try:
            pwrite_all(self.fd, pieces, start)
        except OSError:
            self._cut_back(start)
            raise
        return start

    def _cut_back(self, start: int) -> None:
        """A partial write (disk full ...) must not leave a torn batch behind live data."""
        try:
            os.ftruncate(self.fd, start)
        except OSError:
            logger.exception("could not undo a partial write to %s", self.log_path)

    def _index_appended(self, headers: list[RecordBatchHeader], start: int, first_offset: int,
                        append_time: int | None) -> int:
        """Account for batches just written at ``start``: indexes, largest timestamp, size, next offset."""
        offset = first_offset
        pos = start
        interval = self.index_interval_bytes
        for h in headers:
            size = h.batch_length + LOG_OVERHEAD
            max_ts = h.max_timestamp if append_time is None else append_time
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = offset
            if self.bytes_since_last_index_entry > interval:
                self._add_index_entry(pos, offset)
            self.bytes_since_last_index_entry += size
            offset += h.last_offset_delta + 1
            pos += size
        self.size = pos
        self.next_offset = offset
        return offset

    def _add_index_entry(self, position: int, base_offset: int) -> None:
        oi, ti = self.offset_index, self.time_index
        if not oi.is_full:
            oi.append(base_offset, position)
        ti.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.bytes_since_last_index_entry = 0
        if oi.backlog or ti.backlog:
            self._index_backlog = True

    def _index_batch(self, position: int, base_offset: int, max_timestamp: int, size: int) -> None:
        """Index one batch during recovery (append() does the same inline)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._add_index_entry(position, base_offset)
            if self._index_backlog:
                self._write_index_entries()
        self.bytes_since_last_index_entry += size

    def should_roll(self, incoming_bytes: int, incoming_last_offset: int, now_ms: int, config: LogConfig) -> bool:
        if self.size == 0:
            return False
        return (
            self.size > config.segment_bytes - incoming_bytes
            or now_ms - self.created_ms > config.segment_ms
            or self.offset_index.is_full
            or self.time_index.is_full
            or incoming_last_offset - self.base_offset > MAX_RELATIVE_OFFSET
        )

    def on_become_active(self) -> None:
        """The segment takes appends (new, the last one at load, or the last again after a truncation): nothing
        to prepare, indexes are appended in memory (abstract_index.py)."""

    def on_become_inactive(self) -> None:
        """Record the final largest timestamp and write every index entry: the files hold exactly their entries."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.trim()
        self.time_index.trim()
        self._index_backlog = False

    def flush(self, indexes: bool = True) -> None:
        """fdatasync the data; with ``indexes`` (a segment no longer active) write and fsync the indexes too."""
        os.fdatasync(self.fd)
        if indexes:
            self.offset_index.flush()
            self.time_index.flush()
            self._index_backlog = False

    # -- reading ---------------------------------------------------------------------------------

    def read_header(self, position: int) -> RecordBatchHeader | None:
        data = os.pread(self.fd, BATCH_HEADER_SIZE, position)
        if len(data) < BATCH_HEADER_SIZE:
            return None
        return RecordBatchHeader(*HEADER_STRUCT.unpack(data))

    def iter_headers(self, start: int, end: int | None = None) -> Iterator[tuple[int, RecordBatchHeader]]:
        """(position, header) of each batch from ``start`` (a batch boundary) up to ``end``.

        Reads headers in small chunks; stops quietly at a header that is short or inconsistent
        (recovery, not reads, deals with damaged data).
        """
        end = self.size if end is None else min(end, self.size)
        pos = start
        fd = self.fd
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

    def find_batch(self, offset: int) -> tuple[int, RecordBatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``, or None."""
        if offset >= self.next_offset:
            return None
        _, start = self.offset_index.lookup(offset)
        for pos, h in self.iter_headers(start):
            if h.base_offset + h.last_offset_delta >= offset:
                return pos, h
        return None

    def boundary_before(self, limit: int, start: int) -> int:
        """The last batch end at or before ``limit``, scanning from ``start`` (a batch boundary)."""
        if limit >= self.size:
            return self.size
        _, pos = self.offset_index.lookup_position(limit)
        pos = max(pos, start)
        best = pos
        for p, h in self.iter_headers(pos, limit):
            best = p + h.size
        return best

    def find_timestamp(self, timestamp: int, end_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp`` in the first batch
        whose max_timestamp is >= it, below ``end_offset`` (Kafka's ListOffsets semantics)."""
        if self.max_timestamp < timestamp:
            return None
        _, from_offset = self.time_index.lookup(timestamp)
        found = self.find_batch(from_offset)
        if found is None:
            return None
        for pos, h in self.iter_headers(found[0]):
            if h.base_offset >= end_offset:
                return None
            if h.max_timestamp >= timestamp:
                return self._first_record_at_or_after(pos, h, timestamp)
        return None

    def _first_record_at_or_after(self, pos: int, h: RecordBatchHeader, timestamp: int) -> tuple[int, int]:
        """Walk one batch's records (decompressing if needed; C reader); the batch's (base offset, max
        timestamp) if its records cannot be read, which is still a lower bound."""
        try:
            batch = DefaultRecordBatch(os.pread(self.fd, h.batch_length + LOG_OVERHEAD, pos))
            for record in batch:
                if record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        except Exception as e:  # a batch whose CRC was fine but whose records do not parse
            logger.warning("%s: cannot read the records of the batch at %d: %s", self.log_path, pos, e)
        return h.base_offset, h.max_timestamp

    # -- loading and recovery --------------------------------------------------------------------

    # -- lifecycle -------------------------------------------------------------------------------

    def mark_deleted(self) -> None:
        """Rename the files to ``*.deleted``; the fd stays open so in-flight sendfiles finish."""
        deleted = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.rename(self.log_path, deleted)
        self.log_path = deleted
        for index in (self.offset_index, self.time_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.offset_index.close()
        self.time_index.close()
        os.close(self.fd)

    def delete(self) -> None:
        self.close()
        self.offset_index.delete()
        self.time_index.delete()
        try:
            os.unlink(self.log_path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size}, next_offset={self.next_offset})"
