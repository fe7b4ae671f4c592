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

from ferry.broker.log import segment_recovery
from ferry.broker.log.log_append import pwrite_all, write_batches, write_run
from ferry.broker.log.offset_index import MAX_RELATIVE_OFFSET
from ferry.broker.log.segment_indexes import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    SegmentIndexes,
    iter_headers,
    read_header,
)
from ferry.wire.log_config import LogConfig
from ferry.wire.record.record_batch import (
    ATTRIBUTES_POS,
    BASE_OFFSET_STRUCT,
    BATCH_HEADER_SIZE,
    CRC_POS,
    EPOCH_PREFIX_STRUCT,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_POS,
    PARTITION_LEADER_EPOCH_POS,
    PARTITION_LEADER_EPOCH_STRUCT,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
)

logger = logging.getLogger("ferry.log")

LOG_SUFFIX = ".log"
__all__ = ["DELETED_SUFFIX", "INDEX_SUFFIX", "LOG_SUFFIX", "TIME_INDEX_SUFFIX", "LogSegment", "segment_name"]


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



class LogSegment:
    """One segment file: batches written at its end, found again through its indexes (SegmentIndexes), checked
    when it is opened again (segment_recovery.py)."""

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, now_ms: int, suffix: str = "") -> None:
        """``suffix``: files named ``<base>.log<suffix>`` ... (the cleaner writes ``.cleaned`` segments)."""
        self.directory = Path(directory)
        self.base_offset = base_offset
        name = segment_name(base_offset)
        self.log_path = self.directory / (name + LOG_SUFFIX + suffix)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self.size = os.fstat(self.fd).st_size
            self.indexes = SegmentIndexes(self.directory, name, base_offset, config.max_index_bytes,
                                          config.index_interval_bytes, suffix)
        except BaseException:
            os.close(self.fd)
            raise
        self.next_offset = base_offset
        self.created_ms = now_ms
        self.recovered_epochs: list[tuple[int, int]] = []  # (leader epoch, first offset) as recovery found them
        self.closed = False

    @property
    def max_timestamp(self) -> int:
        """The largest batch timestamp in the segment (-1 if none): what time-based retention and
        ListOffsets by timestamp look at. The rest of the index state is ``indexes``'."""
        return self.indexes.max_timestamp

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
        if len(headers) == 1 and append_time is None:  # a producer's usual request, without the loop
            h = headers[0]
            size = h.batch_length + LOG_OVERHEAD
            if leader_epoch >= 0:
                pieces = [EPOCH_PREFIX_STRUCT.pack(first_offset, h.batch_length, leader_epoch), buf[16:size]]
            else:
                pieces = [BASE_OFFSET_STRUCT.pack(first_offset), buf[8:size]]
        elif append_time is None:  # hundreds of batches (a copied answer): no Python object per batch
            start = self._write_run(buf, first_offset, leader_epoch)
            self.size, self.next_offset = self.indexes.appended(headers, start, first_offset, None)
            return self.next_offset
        else:
            pieces = []
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
        self.size, self.next_offset = self.indexes.appended(headers, self._write(pieces), first_offset, append_time)
        return self.next_offset

    def append_batches(self, items: list, offset: int, leader_epoch: int) -> int:
        """append() of each batch in ``items`` — (a request's buffer, the batch's position in it, its header) —
        from ``offset`` on, without LogAppendTime: all written by one write_batches (native when built)
        straight from those buffers; all or nothing is counted."""
        if self.indexes.backlog:
            self.indexes.write_pending()
        start = self.size
        writes = []
        headers = []
        first = offset
        for buf, pos, h in items:
            writes.append((buf, pos, h.batch_length + LOG_OVERHEAD, offset, h.batch_length))
            headers.append(h)
            offset += h.last_offset_delta + 1
        try:
            write_batches(self.fd, writes, leader_epoch, start)
        except OSError:
            self._cut_back(start)
            raise
        self.size, self.next_offset = self.indexes.appended(headers, start, first, None)
        return self.next_offset

    def append_raw(self, buf: memoryview | bytes, headers: list[RecordBatchHeader]) -> int:
        """Write batches byte for byte as they are (a follower's copy of its leader's batches, the cleaner's
        output: offsets, leader epochs and timestamps already set, gaps between batches allowed where
        compaction removed records). Returns the next offset."""
        self.size, self.next_offset = self.indexes.appended(headers, self._write([buf]), None, None)
        return self.next_offset

    def _write(self, pieces: list) -> int:
        """Write ``pieces`` at the end of the file (after the index entries waiting in memory: a full disk then
        fails this append with nothing of it written); returns where they start."""
        if self.indexes.backlog:
            self.indexes.write_pending()
        start = self.size
        try:
            pwrite_all(self.fd, pieces, start)
        except OSError:
            self._cut_back(start)
            raise
        return start

    def _write_run(self, buf: memoryview, first_offset: int, leader_epoch: int) -> int:
        """_write of the batches in ``buf`` with offsets from ``first_offset`` (log_append.write_run)."""
        if self.indexes.backlog:
            self.indexes.write_pending()
        start = self.size
        try:
            write_run(self.fd, buf, first_offset, leader_epoch, start)
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

    def should_roll(self, incoming_bytes: int, incoming_last_offset: int, now_ms: int, config: LogConfig) -> bool:
        if self.size == 0:
            return False
        return (
            self.size > config.segment_bytes - incoming_bytes
            or now_ms - self.created_ms > config.segment_ms
            or self.indexes.offset_index.is_full
            or self.indexes.time_index.is_full
            or incoming_last_offset - self.base_offset > MAX_RELATIVE_OFFSET
        )

    def on_become_active(self) -> None:
        """The segment takes appends (new, the last one at load, or the last again after a truncation): nothing
        to prepare, indexes are appended in memory (abstract_index.py)."""

    def on_become_inactive(self) -> None:
        """Record the final largest timestamp and write every index entry: the files hold exactly their entries."""
        self.indexes.on_become_inactive()

    def flush(self, indexes: bool = True) -> None:
        """fdatasync the data; with ``indexes`` (a segment no longer active) write and fsync the indexes too."""
        os.fdatasync(self.fd)
        if indexes:
            self.indexes.flush()

    def truncate_to(self, offset: int) -> int:
        """Remove the batches at or after ``offset``, whole batches only (the one holding ``offset`` goes
        entirely), with their index entries; the largest timestamp is found again. Returns the bytes removed.

        The caller fsyncs: a truncation that a power loss undid could bring the removed batches back."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        pos, h = found
        removed = self.size - pos
        os.ftruncate(self.fd, pos)
        self.size = pos
        self.next_offset = h.base_offset
        self.indexes.truncate_to(self.fd, h.base_offset, pos)
        return removed

    # -- loading and recovery --------------------------------------------------------------------

    def load(self, now_ms: int) -> str | None:
        """Load a segment that is not recovered: trust the indexes, find the end by a header scan.

        Returns why the segment needs recovery (damaged index, inconsistent tail), or None.
        """
        reason, next_offset = segment_recovery.check_tail(self.fd, self.size, self.indexes)
        if reason is None:
            self.next_offset = next_offset if self.size else self.base_offset
            self.created_ms = segment_recovery.created_ms(self.fd, self.size, now_ms)
        return reason

    def recover(self, now_ms: int) -> int:
        """Scan every batch (header checks, CRC-32C, offsets increasing), rebuild both indexes,
        and truncate the file after the last good batch. Returns the number of bytes removed."""
        found = segment_recovery.recover(self.fd, self.log_path, self.base_offset, self.indexes)
        self.size, self.next_offset, self.recovered_epochs = found.size, found.next_offset, found.epochs
        self.created_ms = segment_recovery.created_ms(self.fd, self.size, now_ms)
        return found.truncated

    # -- reading ---------------------------------------------------------------------------------

    def read_header(self, position: int) -> RecordBatchHeader | None:
        return read_header(self.fd, position)

    def iter_headers(self, start: int, end: int | None = None) -> Iterator[tuple[int, RecordBatchHeader]]:
        """(position, header) of each batch from ``start`` (a batch boundary) up to ``end`` (default: the end)."""
        return iter_headers(self.fd, start, self.size if end is None else min(end, self.size))

    def find_batch(self, offset: int) -> tuple[int, RecordBatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``, or None."""
        if offset >= self.next_offset:
            return None
        _, start = self.indexes.offset_index.lookup(offset)
        for pos, h in self.iter_headers(start):
            if h.base_offset + h.last_offset_delta >= offset:
                return pos, h
        return None

    def boundary_before(self, limit: int, start: int) -> int:
        """The last batch end at or before ``limit``, scanning from ``start`` (a batch boundary)."""
        if limit >= self.size:
            return self.size
        _, pos = self.indexes.offset_index.lookup_position(limit)
        pos = max(pos, start)
        best = pos
        for p, h in self.iter_headers(pos, limit):
            best = p + h.size
        return best

    def find_timestamp(self, timestamp: int, end_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp`` in the first batch
        whose max_timestamp is >= it, below ``end_offset`` (Kafka's ListOffsets semantics)."""
        if self.indexes.max_timestamp < timestamp:
            return None
        _, from_offset = self.indexes.time_index.lookup(timestamp)
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

    # -- lifecycle -------------------------------------------------------------------------------

    def rename_suffix(self, suffix: str) -> None:
        """Rename the files to their plain names plus ``suffix`` (the cleaner: ``.cleaned`` -> ``.swap`` -> "");
        indexes first, the log file last: a log file with the suffix means its indexes have it too."""
        name = segment_name(self.base_offset)
        self.indexes.rename(self.directory, name, suffix)
        path = self.directory / (name + LOG_SUFFIX + suffix)
        os.rename(self.log_path, path)
        self.log_path = path

    def mark_deleted(self) -> None:
        """Rename the files to ``*.deleted``; the fd stays open so in-flight sendfiles finish."""
        deleted = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.rename(self.log_path, deleted)
        self.log_path = deleted
        self.indexes.mark_deleted()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.indexes.close()
        os.close(self.fd)

    def delete(self) -> None:
        self.close()
        self.indexes.delete()
        try:
            os.unlink(self.log_path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size}, next_offset={self.next_offset})"
