"""Opening a partition's log (Kafka's LogLoader): segments loaded, a torn or corrupt tail recovered after the
recovery point, the leader epoch cache and the idempotent-producer state rebuilt as of the recovered log."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ferry.broker.log.leader_epoch_cache import EpochEntry, LeaderEpochCheckpointError, LeaderEpochFileCache
from ferry.broker.log.log_compaction import complete_swaps
from ferry.broker.log.log_segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from ferry.broker.log.producer_state import ProducerStateManager
from ferry.wire.atomic_file import fsync_dir
from ferry.wire.log_config import LogConfig
from ferry.wire.record.control_batch import CONTROL_PREFIX, control_type

logger = logging.getLogger("ferry.log")


def _segment_bases(directory: Path, name: str) -> list[int]:
    """The base offsets of the segment files, after removing what an unfinished deletion or write left."""
    bases: list[int] = []
    names = os.listdir(directory)
    present = set(names)  # one listing, no stat per file: a start opens thousands of logs
    for entry in names:
        if entry.endswith(DELETED_SUFFIX) or entry.endswith(".tmp"):
            # left by a deletion or a checkpoint write that did not finish
            (directory / entry).unlink(missing_ok=True)
            continue
        stem, dot, suffix = entry.partition(".")
        if not (len(stem) == 20 and stem.isdigit()):
            continue
        if "." + suffix == LOG_SUFFIX:
            bases.append(int(stem))
        elif "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and stem + LOG_SUFFIX not in present:
            logger.info("%s: removing index %s without a log file", name, entry)
            (directory / entry).unlink(missing_ok=True)
    bases.sort()
    return bases


def load_segments(directory: Path, config: LogConfig, now: int,
                  recovery_point: int | None) -> tuple[list[LogSegment], list[LogSegment], bool]:
    """(segments, the ones recovered, whether the log is new): every segment opened; those holding data beyond
    ``recovery_point`` (None: unknown, the last one) scanned and verified, whatever followed a truncated one
    deleted. A new log has nothing to verify or make durable yet: its directory is fsynced by the first flush
    (a broker creating thousands of partitions then pays no fsync per partition up front)."""
    name = directory.name
    complete_swaps(directory)  # a cleaner's swap that a crash interrupted (log_compaction.py)
    bases = _segment_bases(directory, name)
    if not bases:
        new = LogSegment(directory, 0, config, now)
        new.on_become_active()
        return [new], [], True
    segments = [LogSegment(directory, b, config, now) for b in bases]
    last = len(segments) - 1
    recovered: list[LogSegment] = []
    i = 0
    while i < len(segments):
        seg = segments[i]
        must_verify = i == last if recovery_point is None else False
        reason = None if must_verify else seg.load(now)
        if must_verify or reason is not None or (
            recovery_point is not None and seg.next_offset > recovery_point and seg.size > 0
        ):
            if reason is not None:
                logger.warning("%s: segment %d needs recovery: %s", name, seg.base_offset, reason)
            truncated = seg.recover(now)
            recovered.append(seg)
            if truncated and i < last:
                # Offsets must stay contiguous: whatever followed the damage goes too.
                for later in segments[i + 1 :]:
                    logger.error(
                        "%s: deleting segment %d (%d bytes) after the truncated segment %d",
                        name, later.base_offset, later.size, seg.base_offset,
                    )
                    later.delete()
                segments = segments[: i + 1]
                last = i
        i += 1
    for seg in segments[:-1]:
        seg.on_become_inactive()
    segments[-1].on_become_active()
    for seg in recovered:
        seg.flush()  # what survived recovery is now durable: flushed_offset may cover it
    if recovered:
        fsync_dir(directory)
    return segments, recovered, False


def load_leader_epoch_cache(directory: Path, segments: list[LogSegment], recovered: list[LogSegment],
                            start: int, end: int) -> LeaderEpochFileCache:
    """The epoch cache as of the recovered log [start, end): entries past a truncated tail dropped, the first
    moved to the log start, the epochs of recovered data whose checkpoint write a crash lost added (Kafka does
    the same). A damaged checkpoint (never seen: it is replaced atomically) is rebuilt from the batches'
    partitionLeaderEpoch."""
    name = directory.name
    try:
        cache = LeaderEpochFileCache(directory)
    except LeaderEpochCheckpointError as exc:
        logger.error("%s: %s; rebuilding it from the log", name, exc)
        cache = LeaderEpochFileCache(directory, _epochs_in_log(segments))
    dropped = cache.truncate_from_end(end)
    if dropped:
        logger.warning("%s: leader epochs %s start beyond the log end %d; dropped", name, dropped, end)
    cache.truncate_from_start(start)
    for seg in recovered:
        for epoch, offset in seg.recovered_epochs:
            if offset >= start:
                cache.assign(epoch, offset)
    return cache


def _epochs_in_log(segments: list[LogSegment]) -> list[EpochEntry]:
    """(epoch, first offset) each time the batches' partitionLeaderEpoch grows (a full header scan)."""
    entries: list[EpochEntry] = []
    latest = -1
    for seg in segments:
        for _, h in seg.iter_headers(0):
            if h.partition_leader_epoch > latest:
                latest = h.partition_leader_epoch
                entries.append(EpochEntry(latest, h.base_offset))
    return entries


def rebuild_producer_state(directory: Path, segments: list[LogSegment], state: ProducerStateManager,
                           log_start: int, log_end: int, high_watermark: int, at_load: bool = False) -> bool:
    """``state`` from the snapshot (if it lies within the log) plus a scan of what follows it. True when the
    snapshot on disk is exactly this state (nothing to write).

    At load a usable snapshot stays on disk (the data it covers is unchanged until a truncation, which
    removes it), and counts as written when nothing followed it: a restart with thousands of logs then
    rewrites no snapshot. Otherwise (a truncation, a snapshot beyond the log) it is removed at once, so a
    later crash never combines an old snapshot with a truncated log.
    """
    snap = ProducerStateManager.take_snapshot(directory, keep=at_load)
    start = log_start
    used = snap is not None and log_start <= snap[0] <= log_end
    if snap is not None and not used and at_load:
        ProducerStateManager.remove_snapshot(directory)
    if snap is not None and used:
        start = snap[0]
        state.reset(snap[1])
    else:
        state.reset()
    for seg in segments:
        if seg.next_offset <= start:
            continue
        found = seg.find_batch(start)
        if found is None:
            continue
        for pos, h in seg.iter_headers(found[0]):
            if h.producer_id >= 0 and h.base_offset >= start:
                control = control_type(os.pread(seg.fd, CONTROL_PREFIX, pos)) if h.is_control else -1
                state.update(h, h.base_offset, control=control)
    state.first_unstable_offset(high_watermark)  # decided transactions below it are stable
    return at_load and used and state.updates == 0 and start == log_end
