"""The log cleaner of one data directory (Kafka's LogCleaner + LogCleanerManager): which compacted log to clean
next, on how many threads, and where each log's clean part ends.

A log with ``cleanup.policy`` containing ``compact`` is cleaned when the dirty part (records written since its
last clean, up to the cleanable end: see LogCompaction.cleanable_range) is at least ``min.cleanable.dirty.ratio``
of the cleanable bytes, or when its oldest dirty record is older than ``max.compaction.lag.ms``; the dirtiest log
goes first. Where each log's clean part ends is kept in ``<data dir>/cleaner-offset-checkpoint`` (Kafka's name and
format), so a restarted broker does not clean everything again; a checkpoint outside the log (truncation,
retention) restarts from the log start. The cleaning itself is log_compactor.py's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ferry.broker.log.log import Log, wall_clock_ms
from ferry.broker.log.log_compactor import DEFAULT_MAP_BYTES, CleanAborted, CleanerStats, LogCompactor
from ferry.broker.log.offset_checkpoint import read_checkpoint, write_checkpoint
from ferry.broker.log.throttler import Throttler
from ferry.wire.record.errors import KafkaStorageError

logger = logging.getLogger("ferry.log.cleaner")

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
Key = tuple[str, int]


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's cleaner settings (Kafka's names: log.cleaner.enable, log.cleaner.threads,
    log.cleaner.io.max.bytes.per.second, log.cleaner.backoff.ms, log.cleaner.dedupe.buffer.size)."""

    enable: bool = True
    threads: int = 1
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000  # how long an idle cleaner thread sleeps before looking again
    dedupe_buffer_size: int = DEFAULT_MAP_BYTES  # the offset maps' memory, shared by the threads

    @classmethod
    def from_properties(cls, p: Mapping[str, str]) -> CleanerConfig:
        """From a broker's properties; ValueError naming the setting."""
        out: dict[str, object] = {}
        if "log.cleaner.enable" in p:
            text = p["log.cleaner.enable"].strip().lower()
            if text not in ("true", "false"):
                raise ValueError(f"log.cleaner.enable: expected true or false, got {p['log.cleaner.enable']!r}")
            out["enable"] = text == "true"
        for key, attr, kind in (("log.cleaner.threads", "threads", int), ("log.cleaner.backoff.ms", "backoff_ms", int),
                                ("log.cleaner.io.max.bytes.per.second", "io_max_bytes_per_second", float),
                                ("log.cleaner.dedupe.buffer.size", "dedupe_buffer_size", int)):
            if key in p:
                try:
                    value = kind(p[key])
                except ValueError:
                    raise ValueError(f"{key}: expected a number, got {p[key]!r}") from None
                if value <= 0:
                    raise ValueError(f"{key}: must be positive, got {p[key]!r}")
                out[attr] = value
        return cls(**out)  # type: ignore[arg-type]


CLEANER_KEYS = ("log.cleaner.enable", "log.cleaner.threads", "log.cleaner.backoff.ms",
                "log.cleaner.io.max.bytes.per.second", "log.cleaner.dedupe.buffer.size")


@dataclass(frozen=True)
class CleanCandidate:
    key: Key
    log: Log
    first_dirty: int
    dirty_ratio: float


class LogCleaner:
    """Cleaner threads over the logs ``logs()`` returns (the log manager's, read on every pass)."""

    def __init__(self, config: CleanerConfig, data_dir: Path | str, logs: Callable[[], dict[Key, Log]],
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self._checkpoint_path = Path(data_dir) / CLEANER_CHECKPOINT_FILE
        self._logs = logs
        self._clock = clock
        self._stop = threading.Event()
        self._compactor = LogCompactor(Throttler(config.io_max_bytes_per_second), clock, self._stop.is_set,
                                       config.dedupe_buffer_size // config.threads)
        self._lock = threading.Lock()
        self._in_progress: set[Key] = set()
        self._first_dirty: dict[Key, int] = read_checkpoint(self._checkpoint_path)
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self.cleans = 0  # completed cleans (tests and metrics)
        self.last_stats: CleanerStats | None = None

    # -- choosing ----------------------------------------------------------------------------------

    def first_dirty_offset(self, key: Key, log: Log) -> int:
        """Where ``log``'s dirty part starts: its checkpoint, or the log start when that is outside the log."""
        offset = self._first_dirty.get(key, log.log_start_offset)
        truncated = log.compaction.truncated_to
        if truncated is not None:
            offset = min(offset, truncated)
        if not log.log_start_offset <= offset <= log.log_end_offset:
            return log.log_start_offset
        return offset

    def candidate(self, key: Key, log: Log, now: int) -> CleanCandidate | None:
        """The log as a candidate now, or None (not compacted, nothing cleanable, not dirty enough)."""
        config = log.config
        if not config.compact or log.offline:
            return None
        first_dirty = self.first_dirty_offset(key, log)
        rng = log.compaction.cleanable_range(now)
        if rng is None or first_dirty >= rng.end:
            return None
        clean = sum(s.size for s in rng.segments if s.next_offset <= first_dirty)
        dirty_segments = [s for s in rng.segments if s.next_offset > first_dirty]
        dirty = sum(s.size for s in dirty_segments)
        ratio = dirty / (clean + dirty) if clean + dirty else 0.0
        overdue = False
        if dirty_segments and config.max_compaction_lag_ms < (1 << 63) - 1:
            first = dirty_segments[0].read_header(0)
            overdue = first is not None and now - first.max_timestamp > config.max_compaction_lag_ms
        if ratio < config.min_cleanable_dirty_ratio and not overdue:
            return None
        return CleanCandidate(key, log, first_dirty, ratio)

    def _grab(self) -> CleanCandidate | None:
        """The dirtiest log no other thread is cleaning, marked in progress."""
        now = self._clock()
        best: CleanCandidate | None = None
        logs = self._logs()
        with self._lock:  # a deleted log's checkpoint goes at once: a topic created again starts dirty
            gone = [k for k in self._first_dirty if k not in logs and k not in self._in_progress]
            for k in gone:
                del self._first_dirty[k]
        if gone:
            self._write_checkpoint()
        for key, log in list(logs.items()):
            with self._lock:
                if key in self._in_progress:
                    continue
            try:
                c = self.candidate(key, log, now)
            except (OSError, KafkaStorageError):
                continue  # a log closing or going offline meanwhile: the next pass sees it
            if c is not None and (best is None or c.dirty_ratio > best.dirty_ratio):
                best = c
        if best is not None:
            with self._lock:
                if best.key in self._in_progress:
                    return None
                self._in_progress.add(best.key)
        return best

    # -- cleaning ----------------------------------------------------------------------------------

    def clean_once(self) -> bool:
        """Clean the dirtiest log (on the calling thread); False when none needed it."""
        c = self._grab()
        if c is None:
            return False
        try:
            result = self._compactor.clean(c.log, c.first_dirty)
        except CleanAborted:
            result = None
        except Exception:
            logger.exception("cleaning %s failed; it will be tried again", c.log.name)
            result = None
        finally:
            with self._lock:
                self._in_progress.discard(c.key)
        if result is None:
            return False
        end, stats = result
        c.log.compaction.truncated_to = None  # what a truncation made dirty again was cleaned just now
        with self._lock:
            self._first_dirty[c.key] = end
            self.cleans += 1
            self.last_stats = stats
        self._write_checkpoint()
        logger.info("%s: cleaned up to offset %d in %.2f s: %d of %d records kept, %.1f MB read, %.1f MB written, "
                    "%d segment(s) swapped", c.log.name, end, stats.seconds, stats.records_kept, stats.records_read,
                    stats.bytes_read / 1e6, stats.bytes_written / 1e6, stats.segments_swapped)
        return True

    def _write_checkpoint(self) -> None:
        live = set(self._logs())
        with self._lock:
            self._first_dirty = {k: v for k, v in self._first_dirty.items() if k in live}
            offsets = dict(self._first_dirty)
        try:
            write_checkpoint(self._checkpoint_path, offsets)
        except OSError:
            logger.exception("could not write %s", self._checkpoint_path)

    # -- threads -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start ``log.cleaner.threads`` threads (none when log.cleaner.enable is false)."""
        if self._threads or not self.config.enable:
            return
        for i in range(self.config.threads):
            t = threading.Thread(target=self._run, name=f"ferry-log-cleaner-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def wake(self) -> None:
        """Look for dirty logs now rather than after the backoff (a topic became compacted, tests)."""
        self._wake.set()

    def stop(self) -> None:
        """Stop the threads; a clean in progress finishes its current segment group first."""
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=60)
        self._threads = []

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.clean_once():
                continue
            self._wake.wait(self.config.backoff_ms / 1000)
            self._wake.clear()
