"""A segment opened again: its files checked, its indexes rebuilt when damaged, its torn or corrupt tail truncated batch by batch."""

from __future__ import annotations

import logging
import os

import crc32c

from ferry.broker.log.offset_index import MAX_RELATIVE_OFFSET
from ferry.wire.record.errors import CorruptRecordError, InvalidRecordError
from ferry.wire.record.record_batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    HEADER_STRUCT,
    RecordBatchHeader,
    check_header,
)

logger = logging.getLogger("ferry.log")
_RECOVERY_CHUNK = 4 * 1024 * 1024


class SegmentRecovery:
    """A segment opened again: its files checked, its indexes rebuilt when damaged, its torn or corrupt tail truncated batch by batch. (a part of LogSegment)."""

    def load(self, now_ms: int) -> str | None:
        """Load a segment that is not recovered: trust the indexes, find the end by a header scan.

        Returns why the segment needs recovery (damaged index, inconsistent tail), or None.
        """
        reason = self.offset_index.sanity_check(self.size)
        if reason:
            return f"offset index: {reason}"
        last_offset, last_pos = self.offset_index.last_entry()
        next_offset = last_offset
        max_ts, max_ts_offset = self.time_index.last_entry()
        end = last_pos
        for pos, h in self.iter_headers(last_pos):
            if h.base_offset < next_offset:
                return f"batch at byte {pos} has base offset {h.base_offset} < {next_offset}"
            next_offset = h.next_offset
            if h.max_timestamp > max_ts:
                max_ts, max_ts_offset = h.max_timestamp, h.base_offset
            end = pos + h.size
        if end != self.size:
            return f"{self.size - end} bytes at the end do not form a whole batch"
        if self.size and self.time_index.entries == 0:
            return "time index is empty"
        reason = self.time_index.sanity_check(next_offset - 1)
        if reason:
            return f"time index: {reason}"
        self.next_offset = next_offset if self.size else self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        self.bytes_since_last_index_entry = self.size - last_pos
        self._set_created(now_ms)
        return None

    def _set_created(self, now_ms: int) -> None:
        # Age for segment.ms counts from the first batch's timestamp when it is plausible.
        first = self.read_header(0) if self.size else None
        if first is not None and 0 < first.max_timestamp <= now_ms:
            self.created_ms = first.max_timestamp
        else:
            self.created_ms = now_ms

    def recover(self, now_ms: int) -> int:
        """Scan every batch (header checks, CRC-32C, offsets increasing), rebuild both indexes,
        and truncate the file after the last good batch. Returns the number of bytes removed."""
        self.offset_index.reset()
        self.time_index.reset()
        self._index_backlog = False
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_last_index_entry = 0
        self.recovered_epochs: list[tuple[int, int]] = []  # (leader epoch, first offset) as the batches say
        expected = self.base_offset
        pos = 0
        size = os.fstat(self.fd).st_size
        buf = b""
        buf_start = 0
        problem = None
        while pos < size:
            if pos + BATCH_HEADER_SIZE > buf_start + len(buf):
                buf = os.pread(self.fd, min(_RECOVERY_CHUNK, size - pos), pos)
                buf_start = pos
            rel = pos - buf_start
            if len(buf) - rel < BATCH_HEADER_SIZE:
                problem = f"{size - pos} bytes too short for a batch header"
                break
            h = RecordBatchHeader(*HEADER_STRUCT.unpack_from(buf, rel))
            try:
                check_header(h, pos, size - pos)
            except (CorruptRecordError, InvalidRecordError) as exc:
                problem = str(exc)
                break
            if h.base_offset < expected or h.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
                problem = f"batch at byte {pos} has base offset {h.base_offset}, expected at least {expected}"
                break
            if rel + h.size <= len(buf):
                mv = memoryview(buf)
                crc = crc32c.crc32c(mv[rel + ATTRIBUTES_POS : rel + h.size])
            else:
                crc = self._streamed_crc(pos + ATTRIBUTES_POS, pos + h.size)
            if crc != h.crc:
                problem = f"batch at byte {pos} (offset {h.base_offset}) fails its CRC-32C check"
                break
            self._index_batch(pos, h.base_offset, h.max_timestamp, h.size)
            epochs = self.recovered_epochs
            if h.partition_leader_epoch >= 0 and (not epochs or h.partition_leader_epoch > epochs[-1][0]):
                epochs.append((h.partition_leader_epoch, h.base_offset))
            expected = h.next_offset
            pos += h.size
        truncated = size - pos
        if truncated:
            os.ftruncate(self.fd, pos)
            logger.warning(
                "recovery of %s: truncated %d bytes after offset %d (%s)",
                self.log_path, truncated, expected - 1, problem,
            )
        self.size = pos
        self.next_offset = expected
        self._set_created(now_ms)
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove the batches at or after ``offset``, whole batches only (the one holding ``offset`` goes
        entirely), with their index entries; the largest timestamp is found again. Returns the bytes removed.

        The caller fsyncs: a truncation that a power loss undid could bring the removed batches back."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        pos, h = found
        end = h.base_offset
        removed = self.size - pos
        os.ftruncate(self.fd, pos)
        self.size = pos
        self.next_offset = end
        self.offset_index.truncate_to(end)
        self.time_index.truncate_to(end)
        max_ts, max_ts_offset = self.time_index.last_entry()
        _, last_pos = self.offset_index.last_entry()
        for _, batch in self.iter_headers(last_pos):
            if batch.max_timestamp > max_ts:
                max_ts, max_ts_offset = batch.max_timestamp, batch.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        self.bytes_since_last_index_entry = pos - last_pos
        return removed

    def _streamed_crc(self, start: int, end: int) -> int:
        """CRC-32C of file bytes [start, end) read in chunks (a batch larger than the read buffer)."""
        crc = 0
        pos = start
        while pos < end:
            data = os.pread(self.fd, min(_RECOVERY_CHUNK, end - pos), pos)
            if not data:
                break
            crc = crc32c.crc32c(data, crc)
            pos += len(data)
        return crc
