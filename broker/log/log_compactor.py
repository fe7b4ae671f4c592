"""Cleaning one log (Kafka's LogCleaner.Cleaner): keep the last record of every key, as Kafka does.

One pass over a log whose cleanable range is [log start, end) (log_compaction.CleanableRange) and whose
records below ``first_dirty`` were already cleaned:
  1. the offset map: key -> offset of its last record in the dirty section [first_dirty, end) (control
     batches and aborted transactions' records do not count);
  2. the segments of the range, grouped up to segment.bytes, are each rewritten into one ``.cleaned``
     segment keeping a record when no later record has its key. A tombstone (null value) is kept until it
     was cleaned once and delete.retention.ms has passed since its batch's timestamp; records without a key
     are dropped; aborted transactions' records are dropped; a transaction marker is kept while its
     transaction still has records, then for delete.retention.ms like a tombstone (KIP-98's rules); a batch
     left empty is dropped. Kafka keeps a producer's last batch header-only instead, so that its sequence
     state survives a rebuild from the log; ferry rebuilds producer state from its snapshot (written at the
     log end, above anything cleanable), and an empty batch is something followers, the mirror and some
     clients refuse. Offsets never change: a rewritten batch keeps baseOffset and lastOffsetDelta
     (record_filter.rebuild_batch); where records went the log has holes;
  3. each cleaned segment is swapped in under the log's lock (LogCompaction.swap, crash-safe).
Reads and writes go through the cleaners' shared I/O throttle (log.cleaner.io.max.bytes.per.second).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka.record._crecords.default_records import DefaultRecordBatch as CRecordBatch

from ferry.broker.log.log import Log
from ferry.broker.log.log_compaction import CLEANED_SUFFIX, CleanableRange
from ferry.broker.log.log_segment import LogSegment
from ferry.broker.log.offset_index import MAX_RELATIVE_OFFSET
from ferry.broker.log.throttler import Throttler
from ferry.wire.log_config import LogConfig
from ferry.wire.record.control_batch import ABORT, CONTROL_PREFIX, control_type
from ferry.wire.record.read_committed import ReadCommitted
from ferry.wire.record.record_batch import RecordBatchHeader, read_header
from ferry.wire.record.record_filter import iter_records, rebuild_batch, records_section

logger = logging.getLogger("ferry.log.cleaner")

WRITE_CHUNK = 1 << 20  # cleaned batches are written this many bytes at a time
DEFAULT_MAP_BYTES = 128 * 1024 * 1024  # Kafka's log.cleaner.dedupe.buffer.size
MAP_ENTRY_BYTES = 100  # what one key of the offset map costs besides its bytes (dict slot, bytes and int objects)


class CleanAborted(Exception):
    """The cleaner stopped in the middle of a clean (nothing of the unfinished group was swapped in)."""


@dataclass
class CleanerStats:
    """What one clean read and wrote (the log line after each clean, the bench's MB/s)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    segments_swapped: int = 0
    seconds: float = 0.0


class LogCompactor:
    """Cleans one log at a time (one per cleaner thread)."""

    def __init__(self, throttler: Throttler, clock: Callable[[], int], stopped: Callable[[], bool] = lambda: False,
                 map_bytes: int = DEFAULT_MAP_BYTES) -> None:
        self._throttler = throttler
        self._clock = clock
        self._stopped = stopped  # the broker is shutting down: give up between segments
        self._map_bytes = map_bytes  # the offset map's memory (log.cleaner.dedupe.buffer.size / threads)

    def clean(self, log: Log, first_dirty: int) -> tuple[int, CleanerStats] | None:
        """Clean ``log`` whose records below ``first_dirty`` are clean; returns (the new first dirty offset, the
        stats), or None when nothing was cleanable or the log changed under the cleaner (retried later)."""
        now = self._clock()
        rng = log.compaction.cleanable_range(now)
        if rng is None or first_dirty >= rng.end:
            return None
        t0 = time.monotonic()
        stats = CleanerStats()
        offset_map, end = self._offset_map(log, rng, first_dirty, stats)
        config = log.config
        txn = _TransactionsSeen(ReadCommitted(rng.aborted))
        for group in group_segments([s for s in rng.segments if s.base_offset < end], config):
            cleaned = self._clean_group(log, group, offset_map, first_dirty, now, txn, stats)
            try:
                swapped = log.compaction.swap(group, cleaned, txn.dropped_aborts)
            except OSError as e:
                raise log.status.storage_failure("log cleaner swap", e) from e
            if not swapped:
                logger.info("%s: the log changed while it was cleaned; cleaning it again later", log.name)
                return None
            txn.dropped_aborts = set()
            stats.segments_swapped += len(group)
        stats.seconds = time.monotonic() - t0
        return end, stats

    # -- 1. the offset map -------------------------------------------------------------------------

    def _offset_map(self, log: Log, rng: CleanableRange, first_dirty: int,
                    stats: CleanerStats) -> tuple[dict[bytes, int], int]:
        """(key -> offset of its last record in [first_dirty, end), end): ``end`` is the cleanable end, or the end
        of the segment after which the map outgrew its memory (at least one dirty segment is always mapped; the
        rest stays dirty for the next clean, as Kafka's cleaner does)."""
        dirty = [s for s in rng.segments if s.next_offset > first_dirty]
        if not dirty:
            return {}, rng.end
        filt = ReadCommitted(log.aborted_transactions(dirty[0].base_offset, rng.end))
        offsets: dict[bytes, int] = {}
        used = 0
        for seg in dirty:
            if used > self._map_bytes:
                logger.info("%s: the offset map is full after %d keys; cleaning up to offset %d this time", log.name,
                            len(offsets), seg.base_offset)
                return offsets, seg.base_offset
            for pos, h in seg.iter_headers(0):
                batch = os.pread(seg.fd, h.size, pos)
                self._throttler.acquire(h.size)
                stats.bytes_read += h.size
                if filt.drops(h, batch) or h.last_offset < first_dirty:
                    continue
                for r in CRecordBatch(batch):  # aiokafka's C reader: ~9x a Python walk of the varints
                    key, offset = r.key, r.offset
                    if key is not None and offset >= first_dirty:
                        if key not in offsets:
                            used += len(key) + MAP_ENTRY_BYTES
                        offsets[key] = offset
        return offsets, rng.end

    # -- 2. rewriting a group of segments ------------------------------------------------------------

    def _clean_group(self, log: Log, group: list[LogSegment], offset_map: dict[bytes, int], first_dirty: int,
                     now: int, txn: _TransactionsSeen, stats: CleanerStats) -> LogSegment:
        """The ``.cleaned`` segment holding what ``group`` keeps, flushed with its indexes."""
        base = group[0].base_offset
        stale = LogSegment(log.dir, base, log.config, now, CLEANED_SUFFIX)  # left by a clean that failed
        stale.delete()
        cleaned = LogSegment(log.dir, base, log.config, now, CLEANED_SUFFIX)
        horizon = now - log.config.delete_retention_ms
        try:
            out: list[bytes] = []
            headers = []
            pending = 0
            for seg in group:
                if self._stopped():
                    raise CleanAborted(f"{log.name}: the cleaner is stopping")
                for pos, h in seg.iter_headers(0):
                    batch = os.pread(seg.fd, h.size, pos)
                    stats.bytes_read += h.size
                    expired = h.last_offset < first_dirty and h.max_timestamp < horizon
                    kept = self._filter_batch(batch, h, offset_map, expired, txn, stats)
                    if kept is None:
                        self._throttler.acquire(h.size)
                        continue
                    out.append(kept)
                    headers.append(h if kept is batch else read_header(kept))
                    pending += len(kept)
                    self._throttler.acquire(h.size + len(kept))
                    if pending >= WRITE_CHUNK:
                        cleaned.append_raw(b"".join(out), headers)
                        stats.bytes_written += pending
                        out, headers, pending = [], [], 0
            if out:
                cleaned.append_raw(b"".join(out), headers)
                stats.bytes_written += pending
            cleaned.on_become_inactive()
            cleaned.flush()
        except BaseException:
            cleaned.delete()
            raise
        return cleaned

    def _filter_batch(self, batch: bytes, h: RecordBatchHeader, offset_map: dict[bytes, int], expired: bool,
                      txn: _TransactionsSeen, stats: CleanerStats) -> bytes | None:
        """What of the batch stays: itself, a rebuilt batch with fewer records, or None."""
        if h.is_control:
            return batch if txn.keep_marker(h, batch, expired) else None
        stats.records_read += h.records_count
        if txn.aborted(h, batch):
            return None
        keep = []  # decided with the C reader; only a batch that loses some records is walked for their bytes
        for r in CRecordBatch(batch):
            key = r.key
            if key is None or (expired and r.value is None):
                keep.append(False)
                continue
            latest = offset_map.get(key)
            keep.append(latest is None or r.offset >= latest)
        n = sum(keep)
        stats.records_kept += n
        if n and h.is_transactional:
            txn.has_records.add(h.producer_id)
        if n == h.records_count:
            return batch
        if not n:
            return None
        raw = records_section(batch, h)
        return rebuild_batch(batch, h, raw, [r for r, k in zip(iter_records(raw), keep, strict=True) if k])


class _TransactionsSeen:
    """Transactions met while one clean walks the log in order: which are aborted (their data goes), which
    kept records (their marker stays), which ABORT markers were dropped (their index entries go)."""

    def __init__(self, filt: ReadCommitted) -> None:
        self._filter = filt
        self.has_records: set[int] = set()  # producers whose open transaction kept records so far
        self.dropped_aborts: set[int] = set()

    def aborted(self, h: RecordBatchHeader, batch: bytes) -> bool:
        return self._filter.drops(h, batch)

    def keep_marker(self, h: RecordBatchHeader, batch: bytes, expired: bool) -> bool:
        self._filter.drops(h, batch)  # an ABORT marker ends its transaction's dropping
        had_records = h.producer_id in self.has_records
        self.has_records.discard(h.producer_id)
        if had_records or not expired:
            return True
        if control_type(batch[:CONTROL_PREFIX]) == ABORT:
            self.dropped_aborts.add(h.base_offset)
        return False


def group_segments(segments: list[LogSegment], config: LogConfig) -> list[list[LogSegment]]:
    """Consecutive segments cleaned into one: together at most segment.bytes (they shrink, never grow), their
    offsets within one index's reach of the first (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    for seg in segments:
        if groups:
            group = groups[-1]
            size = sum(s.size for s in group) + seg.size
            if size <= config.segment_bytes and seg.next_offset - 1 - group[0].base_offset <= MAX_RELATIVE_OFFSET:
                group.append(seg)
                continue
        groups.append([seg])
    return groups
