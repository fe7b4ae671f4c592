"""Idempotent-producer state of one partition (Kafka's KIP-98 sequence checks, without
transactions).

Per producer id the partition remembers the epoch and the last five batches appended
(first/last sequence and offsets). A retried batch that matches one of them is answered with the
original offsets and not written again; a sequence gap is refused. The state is rebuilt from the
batch headers on disk; a snapshot (written at close and by the log manager's checkpoints) limits
that scan to the batches after it.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from ferry.wire.atomic_file import atomic_write
from ferry.wire.record.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from ferry.wire.record.record_batch import RecordBatchHeader

NUM_BATCHES_TO_RETAIN = 5  # Kafka's window: max.in.flight.requests.per.connection <= 5
MAX_SEQUENCE = 0x7FFFFFFF
SNAPSHOT_FILE = "producer-state.snapshot"


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerStateEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_ms: int = -1  # when the producer last appended (broker clock; the batch time when rebuilt from disk)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, h: RecordBatchHeader) -> BatchMetadata | None:
        if h.producer_epoch != self.epoch:
            return None
        last_seq = h.last_sequence
        for b in self.batches:
            if b.first_seq == h.base_sequence and b.last_seq == last_seq:
                return b
        return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        self.updates = 0  # bumped by update(): tells whether a new snapshot is worth writing

    def find_duplicate(self, headers: list[RecordBatchHeader]) -> BatchMetadata | None:
        """The metadata of an earlier append that one of these batches repeats, or None."""
        for h in headers:
            if h.producer_id < 0:
                continue
            entry = self.producers.get(h.producer_id)
            if entry is not None:
                dup = entry.find_duplicate(h)
                if dup is not None:
                    return dup
        return None

    def check(self, headers: list[RecordBatchHeader]) -> None:
        """Raise if a batch comes from a fenced epoch or skips a sequence number.

        Batches of the same producer within one payload are checked against each other too.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) as of this payload
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            if pid in pending:
                epoch, last_seq = pending[pid]
            else:
                entry = self.producers.get(pid)
                if entry is None:
                    # Unknown producer (new, or its batches were deleted by retention): accept
                    # any sequence, as Kafka does since KIP-360.
                    pending[pid] = (h.producer_epoch, h.last_sequence)
                    continue
                epoch, last_seq = entry.epoch, entry.last_seq
            if h.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {h.producer_epoch} is older than the current epoch {epoch}"
                )
            if h.producer_epoch > epoch:
                if h.base_sequence != 0:
                    raise OutOfOrderSequenceError(
                        f"producer {pid} new epoch {h.producer_epoch} must start at sequence 0, got {h.base_sequence}"
                    )
            elif last_seq >= 0 and not _in_sequence(last_seq, h.base_sequence):
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {epoch}: sequence {h.base_sequence} does not follow {last_seq}"
                )
            pending[pid] = (h.producer_epoch, h.last_sequence)

    def update(self, h: RecordBatchHeader, first_offset: int, now_ms: int | None = None) -> None:
        """Record an appended batch (at append time, with the broker's clock, and when rebuilding from disk,
        where the batch's own largest timestamp stands in for the append time)."""
        pid = h.producer_id
        if pid < 0:
            return
        self.updates += 1
        entry = self.producers.get(pid)
        if entry is None or h.producer_epoch != entry.epoch:
            entry = ProducerStateEntry(h.producer_epoch)
            self.producers[pid] = entry
        entry.last_ms = max(entry.last_ms, h.max_timestamp if now_ms is None else now_ms)
        entry.batches.append(
            BatchMetadata(h.base_sequence, h.last_sequence, first_offset, first_offset + h.last_offset_delta)
        )

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers that have not appended for ``expiration_ms`` (Kafka's producer.id.expiration.ms),
        so the state does not grow with every producer session ever seen. A forgotten producer that comes
        back is treated as new (any sequence accepted, as for a producer whose batches retention deleted).
        Returns how many were forgotten."""
        cutoff = now_ms - expiration_ms
        gone = [pid for pid, e in self.producers.items() if e.last_ms < cutoff]
        for pid in gone:
            del self.producers[pid]
        if gone:
            self.updates += 1
        return len(gone)

    # -- snapshot ----------------------------------------------------------------------------

    def dump(self, offset: int) -> str:
        """The state as of ``offset`` (the next offset) as JSON text."""
        return json.dumps({
            "version": 1,
            "offset": offset,
            "producers": {
                str(pid): {"epoch": e.epoch, "last_ms": e.last_ms,
                           "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in e.batches]}
                for pid, e in self.producers.items()
            },
        })

    @staticmethod
    def write_snapshot_text(directory: Path, text: str) -> None:
        """Write a dump() atomically (tmp file, fsync, rename)."""
        atomic_write(Path(directory) / SNAPSHOT_FILE, text.encode(), sync_dir=False)

    def write_snapshot(self, directory: Path, offset: int) -> None:
        self.write_snapshot_text(directory, self.dump(offset))

    @staticmethod
    def take_snapshot(directory: Path) -> tuple[int, ProducerStateManager] | None:
        """Read and remove the snapshot: (offset, state), or None if absent or unreadable.

        Removed so that a later crash never combines an old snapshot with a truncated log.
        """
        path = Path(directory) / SNAPSHOT_FILE
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            return None
        path.unlink(missing_ok=True)
        try:
            state = ProducerStateManager()
            for pid, e in data["producers"].items():
                entry = ProducerStateEntry(int(e["epoch"]), last_ms=int(e.get("last_ms", -1)))
                for fs, ls, fo, lo in e["batches"]:
                    entry.batches.append(BatchMetadata(int(fs), int(ls), int(fo), int(lo)))
                state.producers[int(pid)] = entry
            return int(data["offset"]), state
        except (KeyError, TypeError, ValueError):
            return None
