"""A segment opened again: its files checked, its indexes rebuilt when damaged, its torn or corrupt tail
truncated batch by batch."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

import crc32c

from ferry.broker.log.offset_index import MAX_RELATIVE_OFFSET
from ferry.broker.log.segment_indexes import SegmentIndexes, iter_headers, read_header
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


class Recovered(NamedTuple):
    """What a recovery scan left: the file's new size, its next offset, the bytes cut off, and (leader epoch,
    first offset) each time the batches' partitionLeaderEpoch grew."""

    size: int
    next_offset: int
    truncated: int
    epochs: list[tuple[int, int]]


def check_tail(fd: int, size: int, indexes: SegmentIndexes) -> tuple[str | None, int]:
    """Load a segment that is not recovered: trust the indexes, find the end by a header scan from the last
    offset index entry. (why the segment needs recovery (damaged index, inconsistent tail) or None, its next
    offset); ``indexes`` learn the largest timestamp when the segment is fine."""
    reason = indexes.offset_index.sanity_check(size)
    if reason:
        return f"offset index: {reason}", -1
    last_offset, last_pos = indexes.offset_index.last_entry()
    next_offset = last_offset
    max_ts, max_ts_offset = indexes.time_index.last_entry()
    end = last_pos
    for pos, h in iter_headers(fd, last_pos, size):
        if h.base_offset < next_offset:
            return f"batch at byte {pos} has base offset {h.base_offset} < {next_offset}", -1
        next_offset = h.next_offset
        if h.max_timestamp > max_ts:
            max_ts, max_ts_offset = h.max_timestamp, h.base_offset
        end = pos + h.size
    if end != size:
        return f"{size - end} bytes at the end do not form a whole batch", -1
    if size and indexes.time_index.entries == 0:
        return "time index is empty", -1
    reason = indexes.time_index.sanity_check(next_offset - 1)
    if reason:
        return f"time index: {reason}", -1
    indexes.loaded(max_ts, max_ts_offset, size - last_pos)
    return None, next_offset


def created_ms(fd: int, size: int, now_ms: int) -> int:
    """Age for segment.ms counts from the first batch's timestamp when it is plausible."""
    first = read_header(fd, 0) if size else None
    if first is not None and 0 < first.max_timestamp <= now_ms:
        return first.max_timestamp
    return now_ms


def recover(fd: int, log_path: Path, base_offset: int, indexes: SegmentIndexes) -> Recovered:
    """Scan every batch (header checks, CRC-32C, offsets increasing), rebuild both indexes,
    and truncate the file after the last good batch."""
    indexes.reset()
    epochs: list[tuple[int, int]] = []
    expected = base_offset
    pos = 0
    size = os.fstat(fd).st_size
    buf = b""
    buf_start = 0
    problem = None
    while pos < size:
        if pos + BATCH_HEADER_SIZE > buf_start + len(buf):
            buf = os.pread(fd, min(_RECOVERY_CHUNK, size - pos), pos)
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
        if h.base_offset < expected or h.last_offset - base_offset > MAX_RELATIVE_OFFSET:
            problem = f"batch at byte {pos} has base offset {h.base_offset}, expected at least {expected}"
            break
        if rel + h.size <= len(buf):
            crc = crc32c.crc32c(memoryview(buf)[rel + ATTRIBUTES_POS : rel + h.size])
        else:
            crc = _streamed_crc(fd, pos + ATTRIBUTES_POS, pos + h.size)
        if crc != h.crc:
            problem = f"batch at byte {pos} (offset {h.base_offset}) fails its CRC-32C check"
            break
        indexes.recovered(pos, h.base_offset, h.max_timestamp, h.size)
        if h.partition_leader_epoch >= 0 and (not epochs or h.partition_leader_epoch > epochs[-1][0]):
            epochs.append((h.partition_leader_epoch, h.base_offset))
        expected = h.next_offset
        pos += h.size
    truncated = size - pos
    if truncated:
        os.ftruncate(fd, pos)
        logger.warning("recovery of %s: truncated %d bytes after offset %d (%s)", log_path, truncated, expected - 1,
                       problem)
    return Recovered(pos, expected, truncated, epochs)


def _streamed_crc(fd: int, start: int, end: int) -> int:
    """CRC-32C of file bytes [start, end) read in chunks (a batch larger than the read buffer)."""
    crc = 0
    pos = start
    while pos < end:
        data = os.pread(fd, min(_RECOVERY_CHUNK, end - pos), pos)
        if not data:
            break
        crc = crc32c.crc32c(data, crc)
        pos += len(data)
    return crc
