"""Producer state of one partition: idempotence (Kafka's KIP-98 sequence checks) and transactions.

Per producer id the partition remembers the epoch and the last five batches appended
(first/last sequence and offsets). A retried batch that matches one of them is answered with the
original offsets and not written again; a sequence gap is refused.

Transactions (docs/transactions.md): a transactional batch opens its producer's transaction here (its
first offset is kept in ``ongoing``) until a marker (control batch) of the producer closes it. The
earliest open transaction bounds the last stable offset (LSO): read_committed consumers read no further.
A closed transaction stays "unstable" until the high watermark passes its marker (Kafka does the same:
a consumer must never read a transaction's data without the marker that says whether it was aborted).
Aborted transactions are listed as (marker offset, producer id, first offset) for Fetch's
aborted_transactions.

Everything here is rebuilt from the batches on disk (markers are read for their type); a snapshot
(written at close and by the log manager's checkpoints) limits that scan to the batches after it. The
aborted list is the partition's aborted-transaction index: in the snapshot, and rebuilt by the scan.
"""

from __future__ import annotations

import bisect
import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from ferry.wire.atomic_file import atomic_write
from ferry.wire.record.control_batch import ABORT
from ferry.wire.record.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from ferry.wire.record.record_batch import CONTROL_MASK, TRANSACTIONAL_MASK, RecordBatchHeader

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
        if h.producer_epoch != self.epoch or h.is_control:
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
        self.saved_updates = -1  # ``updates`` when the snapshot on disk was written; -1: unknown
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        # closed transactions whose marker may still be above the high watermark: (first offset, marker offset)
        self.unreplicated: list[tuple[int, int]] = []
        self.aborted: list[tuple[int, int, int]] = []  # (marker offset, producer id, first offset), in log order

    def reset(self, other: ProducerStateManager | None = None) -> None:
        """Become ``other`` (a snapshot read back), or empty: the log's collaborators keep this object."""
        source = other if other is not None else ProducerStateManager()
        self.producers = source.producers
        self.updates = source.updates
        self.ongoing = source.ongoing
        self.unreplicated = source.unreplicated
        self.aborted = source.aborted
        self.saved_updates = -1

    def find_duplicate(self, headers: list[RecordBatchHeader]) -> BatchMetadata | None:
        """The metadata of an earlier append that one of these batches repeats, or None. Each producer's
        retained batches are looked up by first sequence (a payload of hundreds of one producer's batches, an
        embedded mirror's answer, costs a dictionary look-up per batch)."""
        producers = self.producers
        if not producers:
            return None
        if len(headers) == 1:  # a producer's usual request
            h = headers[0]
            entry = producers.get(h.producer_id) if h.producer_id >= 0 else None
            return None if entry is None else entry.find_duplicate(h)
        retained: dict[int, tuple[int, dict[int, list[BatchMetadata]]] | None] = {}
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            if pid in retained:
                known = retained[pid]
            else:
                entry = producers.get(pid)
                known = None
                if entry is not None:
                    by_first: dict[int, list[BatchMetadata]] = {}
                    for b in entry.batches:
                        by_first.setdefault(b.first_seq, []).append(b)
                    known = (entry.epoch, by_first)
                retained[pid] = known
            if known is None or h.producer_epoch != known[0] or h.attributes & CONTROL_MASK:
                continue
            for b in known[1].get(h.base_sequence, ()):
                if b.last_seq == h.last_sequence:
                    return b
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
            if h.is_control:  # a marker: no sequence; a newer epoch (a fencing abort) restarts the sequences
                pending[pid] = (h.producer_epoch, last_seq if h.producer_epoch == epoch else -1)
                continue
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

    def update(self, h: RecordBatchHeader, first_offset: int, now_ms: int | None = None,
               control: int = -1) -> None:
        """Record an appended batch (at append time, with the broker's clock, and when rebuilding from disk,
        where the batch's own largest timestamp stands in for the append time). ``control``: a marker's type
        (control_batch.ABORT or COMMIT)."""
        pid = h.producer_id
        if pid < 0:
            return
        self.updates += 1
        entry = self.producers.get(pid)
        if entry is None or (h.producer_epoch != entry.epoch and not (h.is_control and h.producer_epoch < entry.epoch)):
            entry = ProducerStateEntry(h.producer_epoch)
            self.producers[pid] = entry
        entry.last_ms = max(entry.last_ms, h.max_timestamp if now_ms is None else now_ms)
        if h.is_control:
            first = self.ongoing.pop(pid, None)
            if first is not None:
                self.unreplicated.append((first, first_offset))
                if control == ABORT:
                    self.aborted.append((first_offset, pid, first))
            return
        if h.is_transactional and pid not in self.ongoing:
            self.ongoing[pid] = first_offset
        entry.batches.append(
            BatchMetadata(h.base_sequence, h.last_sequence, first_offset, first_offset + h.last_offset_delta)
        )

    def update_run(self, headers: list[RecordBatchHeader], first_offset: int, now_ms: int) -> bool:
        """update() of consecutive batches from ``first_offset`` at once when they are all data batches of one
        producer id and epoch, neither transactional nor control (an embedded mirror's copied answer: ~800
        batches): the same state, with metadata made only for the last NUM_BATCHES_TO_RETAIN. False, with
        nothing done, for any other run: the caller updates batch by batch."""
        h0 = headers[0]
        pid, epoch = h0.producer_id, h0.producer_epoch
        if pid < 0:
            return False
        special = CONTROL_MASK | TRANSACTIONAL_MASK
        for h in headers:
            if h.producer_id != pid or h.producer_epoch != epoch or h.attributes & special:
                return False
        tail = len(headers) - NUM_BATCHES_TO_RETAIN
        offset = first_offset
        for h in headers[:max(tail, 0)]:
            offset += h.last_offset_delta + 1
        entry = self.producers.get(pid)
        if entry is None or entry.epoch != epoch:
            entry = self.producers[pid] = ProducerStateEntry(epoch)
        entry.last_ms = max(entry.last_ms, now_ms)
        batches = entry.batches
        for h in headers[max(tail, 0):]:
            last = offset + h.last_offset_delta
            batches.append(BatchMetadata(h.base_sequence, h.last_sequence, offset, last))
            offset = last + 1
        self.updates += len(headers)
        return True

    # -- transactions ------------------------------------------------------------------------

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction that is open, or closed by a marker not yet below
        ``high_watermark`` (None: every transaction is decided and replicated). Closed transactions whose
        marker the high watermark passed are forgotten here (the high watermark only grows)."""
        if self.unreplicated:
            self.unreplicated = [t for t in self.unreplicated if t[1] >= high_watermark]
        if not self.ongoing and not self.unreplicated:
            return None
        firsts = list(self.ongoing.values())
        firsts.extend(f for f, _ in self.unreplicated)
        return min(firsts)

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions that overlap [start, end): their marker is
        at or after ``start`` and their first batch before ``end`` (Fetch's aborted_transactions)."""
        aborted = self.aborted
        i = bisect.bisect_left(aborted, (start, -1 << 63, -1 << 63))
        return [(pid, first) for _last, pid, first in aborted[i:] if first < end]

    def forget_aborted_before(self, offset: int) -> None:
        """Drop aborted transactions whose marker is below ``offset`` (retention removed them)."""
        i = bisect.bisect_left(self.aborted, (offset, -1 << 63, -1 << 63))
        if i:
            del self.aborted[:i]

    def forget_aborted(self, marker_offsets: set[int]) -> None:
        """Drop the aborted transactions whose ABORT marker the cleaner removed with all their data: a reader
        would otherwise wait for a marker that is gone and drop that producer's later transactions."""
        self.aborted = [t for t in self.aborted if t[0] not in marker_offsets]
        self.updates += 1

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers that have not appended for ``expiration_ms`` (Kafka's producer.id.expiration.ms),
        so the state does not grow with every producer session ever seen. A forgotten producer that comes
        back is treated as new (any sequence accepted, as for a producer whose batches retention deleted).
        Returns how many were forgotten."""
        cutoff = now_ms - expiration_ms
        open_txns = self.ongoing
        gone = [pid for pid, e in self.producers.items() if e.last_ms < cutoff and pid not in open_txns]
        for pid in gone:
            del self.producers[pid]
        if gone:
            self.updates += 1
        return len(gone)

    # -- snapshot ----------------------------------------------------------------------------

    def dump(self, offset: int) -> str:
        """The state as of ``offset`` (the next offset) as JSON text."""
        return json.dumps({
            "version": 2,
            "offset": offset,
            "producers": {
                str(pid): {"epoch": e.epoch, "last_ms": e.last_ms,
                           "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in e.batches]}
                for pid, e in self.producers.items()
            },
            "ongoing": {str(pid): first for pid, first in self.ongoing.items()},
            "unreplicated": [list(t) for t in self.unreplicated],
            "aborted": [list(t) for t in self.aborted],
        })

    @staticmethod
    def write_snapshot_text(directory: Path, text: str) -> None:
        """Write a dump() atomically (tmp file, fsync, rename)."""
        atomic_write(Path(directory) / SNAPSHOT_FILE, text.encode(), sync_dir=False)

    def write_snapshot(self, directory: Path, offset: int) -> None:
        self.write_snapshot_text(directory, self.dump(offset))

    @staticmethod
    def remove_snapshot(directory: Path) -> None:
        (Path(directory) / SNAPSHOT_FILE).unlink(missing_ok=True)

    @staticmethod
    def take_snapshot(directory: Path, keep: bool = False) -> tuple[int, ProducerStateManager] | None:
        """Read and remove the snapshot: (offset, state), or None if absent or unreadable (then always removed).

        Removed so that a later crash never combines an old snapshot with a truncated log. ``keep``: a log
        being opened keeps it (nothing was truncated; a truncation later removes it through this method).
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
        if not keep:
            path.unlink(missing_ok=True)
        try:
            state = ProducerStateManager()
            for pid, e in data["producers"].items():
                entry = ProducerStateEntry(int(e["epoch"]), last_ms=int(e.get("last_ms", -1)))
                for fs, ls, fo, lo in e["batches"]:
                    entry.batches.append(BatchMetadata(int(fs), int(ls), int(fo), int(lo)))
                state.producers[int(pid)] = entry
            state.ongoing = {int(pid): int(first) for pid, first in data.get("ongoing", {}).items()}
            state.unreplicated = [(int(f), int(m)) for f, m in data.get("unreplicated", [])]
            state.aborted = [(int(m), int(pid), int(f)) for m, pid, f in data.get("aborted", [])]
            return int(data["offset"]), state
        except (KeyError, TypeError, ValueError):
            path.unlink(missing_ok=True)
            return None
