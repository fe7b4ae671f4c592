"""Leader-epoch cache of one partition: which leader epoch began at which offset (Kafka's KIP-101).

A replica that becomes follower asks the leader, with OffsetForLeaderEpoch, where its own latest epoch
ended on the leader and truncates there, instead of to its high watermark (which can lose acknowledged
data or let two replicas diverge). The leader answers from this cache.

File ``leader-epoch-checkpoint`` in the partition directory, Kafka's text format::

    0                   <- version
    2                   <- number of entries
    0 0                 <- "<epoch> <start offset>", epochs and start offsets increasing
    3 1200

Rewritten atomically (tmp file, fsync, rename) on every change: changes are rare (one per leader
change, plus truncations and retention), and the entry must be durable before data of its epoch is.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ferry.wire.atomic_file import atomic_write, fsync_dir

logger = logging.getLogger("ferry.log")

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCheckpointError(ValueError):
    """The checkpoint file does not parse (the caller rebuilds the cache from the log)."""


def read_epoch_checkpoint(path: Path) -> list[EpochEntry] | None:
    """The entries in ``path``; None if the file does not exist; LeaderEpochCheckpointError if damaged."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LeaderEpochCheckpointError(f"cannot read {path}: {exc}") from exc
    try:
        if not lines or lines[0].strip() != str(CHECKPOINT_VERSION):
            raise ValueError(f"unknown version {lines[0] if lines else ''!r}")
        count = int(lines[1])
        body = [line for line in lines[2:] if line.strip()]
        if count < 0 or len(body) != count:
            raise ValueError(f"expected {count} entries, found {len(body)}")
        entries = []
        for line in body:
            epoch, offset = line.split()
            entries.append(EpochEntry(int(epoch), int(offset)))
    except (IndexError, ValueError) as exc:
        raise LeaderEpochCheckpointError(f"damaged {path}: {exc}") from exc
    for prev, cur in zip(entries, entries[1:], strict=False):
        if cur.epoch <= prev.epoch or cur.start_offset < prev.start_offset:
            raise LeaderEpochCheckpointError(f"damaged {path}: {cur} does not follow {prev}")
    return entries


def write_epoch_checkpoint(path: Path, entries: list[EpochEntry], durable: bool = True) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{e.epoch} {e.start_offset}" for e in entries]
    atomic_write(path, ("\n".join(lines) + "\n").encode(), fsync=durable, sync_dir=durable)


class LeaderEpochFileCache:
    """Epoch -> start offset, ascending in both, persisted in ``<dir>/leader-epoch-checkpoint``.

    Thread-safe (its own lock): the leader's OffsetForLeaderEpoch handler reads it while appends and
    truncations change it. Every change is written before the method returns (OSError propagates).
    """

    def __init__(self, directory: Path | str, entries: list[EpochEntry] | None = None) -> None:
        """Load the checkpoint in ``directory`` (empty if missing), or start from ``entries`` (written out).

        LeaderEpochCheckpointError if the file is damaged and no ``entries`` are given.
        """
        self.path = Path(directory) / LEADER_EPOCH_CHECKPOINT_FILE
        self._lock = threading.RLock()
        # set by the Log: turns a failed write into its storage failure (the log dir goes offline), so that
        # callers outside the log (a new leader's epoch) get KafkaStorageError, as every other IO error gives
        self.io_failed: Callable[[str, OSError], Exception] | None = None
        self._unsynced = False  # written since the last fsync (flush)
        if entries is None:
            self._entries = read_epoch_checkpoint(self.path) or []
        else:
            self._entries = list(entries)
            self._write()
        # a plain attribute: the append path compares against it for every produce request
        self.latest_epoch = self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    # -- reading -----------------------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._entries)

    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at ``offset`` was written in (-1 if before the first entry)."""
        with self._lock:
            epoch = UNDEFINED_EPOCH
            for e in self._entries:
                if e.start_offset > offset:
                    break
                epoch = e.epoch
            return epoch

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, as Kafka's endOffsetFor.

        The latest epoch -> (it, ``log_end_offset``). An older epoch -> (the largest known epoch <= it,
        the start offset of the first epoch after it): where the follower's copy of that epoch must end.
        An epoch below the first entry -> (it, the first entry's start): a follower whose epochs the leader
        no longer holds (retention) must not keep anything past that (KIP-279, Kafka 2.0+).
        Undefined (-1, -1) for epoch -1, an empty cache, or an epoch above the latest.
        """
        with self._lock:
            entries = self._entries
            if requested_epoch == UNDEFINED_EPOCH or not entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == entries[-1].epoch:
                return requested_epoch, log_end_offset
            if requested_epoch > entries[-1].epoch:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch < entries[0].epoch:
                return requested_epoch, entries[0].start_offset
            floor = entries[0]
            for e in entries:
                if e.epoch > requested_epoch:
                    return floor.epoch, e.start_offset
                floor = e
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET  # not reached: the latest is > requested here

    # -- changing ----------------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` began at ``start_offset``. Returns whether an entry was added.

        Ignored (False): a negative epoch or offset, an epoch not newer than the latest, and a start offset
        below the latest entry's (that would break the ordering; a warning is logged, as Kafka does).
        """
        if epoch < 0 or start_offset < 0:
            return False
        with self._lock:
            latest = self._entries[-1] if self._entries else None
            if latest is not None:
                if epoch <= latest.epoch:
                    if epoch < latest.epoch or start_offset < latest.start_offset:
                        logger.debug("%s: ignoring epoch %d at %d (latest %s)", self.path.parent.name, epoch,
                                     start_offset, latest)
                    return False
                if start_offset < latest.start_offset:
                    logger.warning("%s: refusing leader epoch %d starting at %d, before the latest epoch %d's "
                                   "start %d", self.path.parent.name, epoch, start_offset, latest.epoch,
                                   latest.start_offset)
                    return False
            self._entries.append(EpochEntry(epoch, start_offset))
            try:
                self._write()
            except BaseException:
                self._entries.pop()
                raise
            self.latest_epoch = epoch
            logger.info("%s: leader epoch %d starts at offset %d", self.path.parent.name, epoch, start_offset)
            return True

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Drop the entries starting at or after ``end_offset`` (the log was truncated there).

        Returns the entries dropped."""
        with self._lock:
            keep = [e for e in self._entries if e.start_offset < end_offset]
            return self._replace(keep)

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """Retention moved the log start to ``start_offset``: drop the entries that ended before it and
        move the start of the one in force there to ``start_offset``. Returns the entries dropped or moved."""
        with self._lock:
            floor = None
            keep: list[EpochEntry] = []
            for e in self._entries:
                if e.start_offset <= start_offset:
                    floor = e
                else:
                    keep.append(e)
            if floor is not None:
                keep.insert(0, EpochEntry(floor.epoch, start_offset))
            return self._replace(keep)

    def clear(self) -> None:
        """Forget every entry (the log was emptied and restarts at a new offset)."""
        with self._lock:
            self._replace([])

    def _replace(self, keep: list[EpochEntry]) -> list[EpochEntry]:
        old = self._entries
        if keep == old:
            return []
        self._entries = keep
        try:
            self._write()
        except BaseException:
            self._entries = old
            raise
        self.latest_epoch = keep[-1].epoch if keep else UNDEFINED_EPOCH
        return [e for e in old if e not in keep]

    def _write(self) -> None:
        """Replace the file (atomically, not yet durable: flush() is, and the log flushes it before any data it
        covers counts as flushed). A new leader of thousands of partitions then pays no fsync per partition;
        after a crash, the epochs of data beyond the recovery point are learnt again from the recovered batches
        (log_recovery.py), as Kafka's recovery assigns them, and a damaged file is rebuilt from the log."""
        try:
            write_epoch_checkpoint(self.path, self._entries, durable=False)
            self._unsynced = True
        except OSError as e:
            if self.io_failed is None:
                raise
            raise self.io_failed("leader epoch checkpoint", e) from e

    def flush(self) -> None:
        """Make the last write durable (fsync of the file and of its directory, for the rename)."""
        with self._lock:
            if not self._unsynced:
                return
            self._unsynced = False  # a write from now on sets it again: the next flush covers that one
        try:  # outside the lock: io_failed takes the log's lock, which an append holds while it assigns
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.path.parent)
        except FileNotFoundError:
            pass  # the log's directory was deleted meanwhile
        except OSError as e:
            self._unsynced = True
            if self.io_failed is None:
                raise
            raise self.io_failed("leader epoch checkpoint", e) from e

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.path.parent.name}, {self._entries})"
