"""The log's side of compaction: which part of it the cleaner may rewrite, and the crash-safe swap of cleaned
segments into it (Kafka's UnifiedLog.replaceSegments). The rewriting itself is log_compactor.py's.

The swap, under the log's lock (a reader sees the old segments or the new one, never a mix):
  1. the cleaned segment, complete and fsynced as ``<base>.log.cleaned`` (+ indexes), is renamed ``.swap``
     (indexes first, the log file last) after ``<base>.swap-end`` records the end of the range it replaces;
  2. the old segments are renamed ``.deleted`` (their files stay open ``file.delete.delay.ms`` for reads
     in flight, as retention's do);
  3. the ``.swap`` files get their plain names, the directory is fsynced, ``.swap-end`` removed.
A crash before 1 leaves ``.cleaned`` files: opening the log deletes them (the old segments are intact). A
crash after 1 leaves a ``.log.swap``: opening the log completes the swap (log_recovery.complete_swaps).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ferry.broker.log.local_log import LocalLog
from ferry.broker.log.log_offline import LogStatus
from ferry.broker.log.log_offsets import LogOffsets
from ferry.broker.log.log_segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_name
from ferry.broker.log.producer_state import ProducerStateManager
from ferry.broker.log.segment_indexes import iter_headers
from ferry.wire.atomic_file import atomic_write, fsync_dir

logger = logging.getLogger("ferry.log")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SWAP_END_SUFFIX = ".swap-end"
# "SECONDS" (or "swap:SECONDS"): wait that long mid-swap (after step 1); "cleaned:SECONDS": before step 1, the
# ``.cleaned`` files complete. For tests that kill the process there; never set in production.
SWAP_DELAY_ENV = "FERRY_TEST_CLEANER_SWAP_DELAY_S"


def _test_pause(stage: str, name: str) -> None:
    """Sleep if SWAP_DELAY_ENV asks for a pause at ``stage`` (tests only)."""
    value = os.environ.get(SWAP_DELAY_ENV, "")
    if not value:
        return
    where, _, seconds = value.rpartition(":")
    if (where or "swap") == stage and float(seconds) > 0:
        logger.warning("%s: cleaner pausing %s s at the %s stage (%s is set)", name, seconds, stage, SWAP_DELAY_ENV)
        time.sleep(float(seconds))


def swap_end_path(directory: Path, base_offset: int) -> Path:
    return directory / (segment_name(base_offset) + SWAP_END_SUFFIX)


@dataclass(frozen=True)
class CleanableRange:
    """What the cleaner may rewrite now: every segment from the log start up to ``end`` (exclusive, a segment
    boundary), never the active segment, never data above the high watermark or the last stable offset, never
    a segment younger than min.compaction.lag.ms."""

    segments: list[LogSegment]  # the segments below ``end``, in order
    end: int
    aborted: list[tuple[int, int]]  # (producer id, first offset) of the aborted transactions below ``end``

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)


class LogCompaction:
    """Ranges for the cleaner and the swap of its output (callers outside the log's lock)."""

    def __init__(self, local: LocalLog, offsets: LogOffsets, producers: ProducerStateManager, status: LogStatus,
                 lock: threading.RLock, clock: Callable[[], int], last_stable_offset: Callable[[], int]) -> None:
        self._local = local
        self._offsets = offsets
        self._producers = producers
        self._status = status
        self._lock = lock
        self._clock = clock
        self._lso = last_stable_offset
        self.truncated_to: int | None = None  # the lowest cut since the last clean (after_truncation)

    def cleanable_range(self, now_ms: int | None = None) -> CleanableRange | None:
        """The segments the cleaner may rewrite now (None: none, or the log is closed or offline)."""
        local, offsets = self._local, self._offsets
        with self._lock:
            if self._status.closed or self._status.offline:
                return None
            now = self._clock() if now_ms is None else now_ms
            bound = min(self._lso(), offsets.high_watermark)
            lag = local.config.min_compaction_lag_ms
            chosen: list[LogSegment] = []
            segments = local.segments
            for seg in segments[:-1]:  # the active segment is never cleaned
                if seg.next_offset > bound or (lag and seg.max_timestamp > now - lag):
                    break
                chosen.append(seg)
            if not chosen:
                return None
            end = segments[len(chosen)].base_offset
            return CleanableRange(chosen, end, self._producers.aborted_between(offsets.start, end))

    def after_truncation(self, truncate_to: Callable[[int], bool]) -> Callable[[int], bool]:
        """``truncate_to`` that also remembers how low the log was cut: a truncation below the cleaner's
        checkpoint (an unclean leader election) makes what grows there again dirty (``truncated_to``)."""

        def truncate(offset: int) -> bool:
            removed = truncate_to(offset)
            if removed:
                low = self.truncated_to
                self.truncated_to = offset if low is None else min(low, offset)
            return removed

        return truncate

    def swap(self, old: list[LogSegment], cleaned: LogSegment, dropped_aborts: set[int]) -> bool:
        """Replace ``old`` (consecutive segments of the log) by ``cleaned`` (complete, fsynced, ``.cleaned``);
        ``dropped_aborts``: offsets of ABORT markers the cleaner removed (their transactions leave the aborted
        index). False (``cleaned`` deleted, nothing changed) when the log moved on meanwhile: ``old`` is no
        longer in it (retention, truncation, deletion). OSError: the caller takes the log offline."""
        local = self._local
        _test_pause("cleaned", local.name)
        with self._lock:
            segments = local.segments
            try:
                i = next(k for k, s in enumerate(segments) if s is old[0])
            except StopIteration:
                i = -1
            if (self._status.closed or self._status.offline or i < 0 or segments[i : i + len(old)] != old
                    or i + len(old) >= len(segments)):
                cleaned.delete()
                return False
            end = segments[i + len(old)].base_offset
            sidecar = swap_end_path(local.dir, cleaned.base_offset)
            atomic_write(sidecar, f"{end}\n".encode())
            cleaned.rename_suffix(SWAP_SUFFIX)
            fsync_dir(local.dir)
            _test_pause("swap", local.name)
            now = self._clock()
            local.segments = segments[:i] + [cleaned] + segments[i + len(old) :]
            local.bases = [s.base_offset for s in local.segments]
            local.retire(old, now)
            cleaned.rename_suffix("")
            fsync_dir(local.dir)
            sidecar.unlink(missing_ok=True)
            if dropped_aborts:
                self._producers.forget_aborted(dropped_aborts)
            return True



def complete_swaps(directory: Path) -> int:
    """At open, before the segments are listed: delete what an unfinished cleaning left (``.cleaned``) and
    finish every swap a crash interrupted (a ``.log.swap`` is complete: its old segments go, it takes its
    plain name). Returns how many swaps were finished."""
    names = os.listdir(directory)
    for entry in names:
        if entry.endswith(CLEANED_SUFFIX):
            (directory / entry).unlink(missing_ok=True)
    finished = 0
    for entry in sorted(names):
        if not (entry.endswith(LOG_SUFFIX + SWAP_SUFFIX) and _is_segment_stem(entry[:20])):
            continue
        base = int(entry[:20])
        end = _swap_end(directory, base)
        present = set(os.listdir(directory))
        for other in present:
            stem, _, suffix = other.partition(".")
            if not _is_segment_stem(stem) or "." + suffix not in PLAIN_SUFFIXES or not base <= int(stem) < end:
                continue
            if int(stem) == base and "." + suffix != LOG_SUFFIX and other + SWAP_SUFFIX not in present:
                continue  # the swapped segment's index, already renamed before a crash
            (directory / other).unlink(missing_ok=True)
        name = segment_name(base)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
            swapped = directory / (name + suffix + SWAP_SUFFIX)
            if swapped.exists():
                os.rename(swapped, directory / (name + suffix))
        fsync_dir(directory)
        swap_end_path(directory, base).unlink(missing_ok=True)
        logger.warning("%s: finished the swap of cleaned segment %d (replacing offsets [%d, %d)) that a crash "
                       "interrupted", directory.name, base, base, end)
        finished += 1
    for entry in os.listdir(directory):  # leftovers of a swap step 1 did not reach
        if entry.endswith(SWAP_SUFFIX) or entry.endswith(SWAP_END_SUFFIX):
            (directory / entry).unlink(missing_ok=True)
    return finished


PLAIN_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def _is_segment_stem(stem: str) -> bool:
    return len(stem) == 20 and stem.isdigit()


def _swap_end(directory: Path, base: int) -> int:
    """The end of the range a swap replaces: its ``.swap-end`` file, else (never seen: it is written first)
    the swapped segment's own next offset."""
    try:
        return int(swap_end_path(directory, base).read_text().strip())
    except (OSError, ValueError):
        fd = os.open(directory / (segment_name(base) + LOG_SUFFIX + SWAP_SUFFIX), os.O_RDONLY)
        try:
            end = base
            for _, h in iter_headers(fd, 0, os.fstat(fd).st_size):
                end = h.next_offset
            return end
        finally:
            os.close(fd)
