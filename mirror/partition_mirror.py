"""One owned live partition: where to fetch next, what is in flight to the offline cluster, and the offset
that is safe to commit (everything before it acknowledged by the offline cluster)."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from ferry.mirror.batch_rewrite import next_sequence
from ferry.wire.record.record_batch import RecordBatchHeader

TopicPartition = tuple[str, int]

INITIAL_FETCH_BYTES = 4 << 20  # above COALESCE_BYTES: one fetch fills a whole coalesced batch
MAX_FETCH_BYTES = 64 << 20
MIN_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0

SYNCED, SYNC_LOCAL, SYNC_FULL = 0, 1, 2  # PartitionMirror.sync: copying, or what has to be read first


@dataclass(slots=True)
class PartitionProgress:
    """What the offline cluster acknowledged of a partition, for its checkpoint: the live offset copied up to,
    the offline offset and sequence after the mirror's last batch, and the record counts (bucket -> records)
    acknowledged since the last report."""

    live: int
    offline: int
    seq: int
    generation: int  # the partition's sync generation (reports of an older one are stale)
    counts: Counter = field(default_factory=Counter)


@dataclass(slots=True, eq=False)
class PendingBatch:
    """A rewritten batch not yet acknowledged: resent byte-identical (same sequence) until it is."""

    buf: bytearray  # shared with the other batches of its fetch
    start: int
    size: int
    header: RecordBatchHeader  # the source batch's header
    resume_offset: int  # where to fetch again if this batch is dropped unacknowledged
    sequence: int  # the base sequence stamped into it
    acked: bool = False
    uncertain: bool = False  # sent, outcome unknown: resent alone so the broker's dedupe is exact
    end_offset: int = -1  # the source offset after this batch (a coalesced batch: after its last source)
    coalesced: bool = False  # re-built from several source batches: may be split if refused as too large
    offline_offset: int = -1  # where the offline cluster put it (known once acknowledged)
    in_flight: bool = False  # in a produce request whose answer has not been read yet
    dropped: bool = False  # no longer pending (split back, or the partition synced again): answers ignored
    counts: dict[int, int] | None = None  # audit counts made when it was coalesced (else counted on its ack)

    def view(self) -> memoryview:
        return memoryview(self.buf)[self.start:self.start + self.size]


@dataclass(slots=True, eq=False)
class PartitionMirror:
    """One owned partition's copy state, shared by the stream's fetching, producing and sync."""

    topic: str
    partition: int
    fetch_offset: int | None  # None until synced (then the live offset to fetch next)
    assigned: int | None = None  # the offset it was handed over with (used only without any checkpoint)
    count: bool = False  # the mirror tier audit-counts its records (decided once, when it is assigned)
    next_seq: int = 0  # the sequence stamped into the next fetched batch
    sync: int = SYNC_FULL  # SYNCED, or the sync to run before copying (tail_sync.py)
    sync_retry_at: float = 0.0
    sync_failures: int = 0
    generation: int = 0  # bumped by every full sync
    epoch: int = 0  # the producer epoch used in this partition
    acked_live: int = 0  # the live offset after the last acknowledged batch of the acknowledged prefix
    acked_offline: int = 0  # the offline offset after it
    acked_seq: int = 0  # the sequence after it
    counts: Counter = field(default_factory=Counter)  # records acknowledged since the last report, by bucket
    # one batch in flight until the first is acknowledged: an offline broker that does not know the producer
    # in this partition yet takes any sequence, so a later batch could land while an earlier one is refused
    solo: bool = True
    pending: deque[PendingBatch] = field(default_factory=deque)
    pending_size: int = 0  # bytes in `pending`
    high_watermark: int = -1
    in_flight: int = 0  # batches sent and not answered yet, dropped ones included (their answers are due too)
    produce_node: int | None = None  # the offline broker the batches in flight went to
    fetch_bytes: int = INITIAL_FETCH_BYTES
    fetch_sent_offset: int | None = None  # the offset of the fetch in flight (its answer is stale otherwise)
    fetch_retry_at: float = 0.0
    produce_retry_at: float = 0.0
    fetch_failures: int = 0
    produce_failures: int = 0

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    def start(self, live: int, offline: int, seq: int, epoch: int) -> None:
        """Copy from ``live`` on, the offline partition ending at ``offline`` with sequence ``seq`` next."""
        for b in self.pending:
            b.dropped = True
        self.pending.clear()
        self.pending_size = 0
        self.fetch_offset = self.acked_live = live
        self.fetch_sent_offset = None
        self.acked_offline, self.acked_seq, self.epoch = offline, seq, epoch
        self.next_seq = seq
        self.solo = True
        self.sync, self.sync_failures, self.sync_retry_at = SYNCED, 0, 0.0
        self.fetch_retry_at = self.produce_retry_at = 0.0
        self.fetch_failures = self.produce_failures = 0

    def sync_failed(self, now: float) -> float:
        self.sync_failures += 1
        self.sync_retry_at = now + backoff(self.sync_failures)
        return self.sync_retry_at

    def commit_offset(self) -> int | None:
        """The next live offset not yet acknowledged by the offline cluster."""
        for b in self.pending:
            if not b.acked:
                return b.resume_offset
        return self.fetch_offset

    def unacked(self, limit: int) -> list[PendingBatch]:
        out = []
        for b in self.pending:
            if not b.acked:
                out.append(b)
                if len(out) >= limit:
                    break
        return out

    def sendable(self, limit: int) -> list[PendingBatch]:
        """The batches to send next, in order: those after the ones in flight, within the first ``limit``
        unacknowledged (the offline broker remembers that many per producer, so every retry is recognised).

        None while a batch waits to be sent again ahead of one still in flight (an answer failed in the
        middle: the later ones' answers come first, so nothing overtakes), while answers for dropped
        batches are outstanding (a split or sync: their sequences are about to be reused).
        """
        out: list[PendingBatch] = []
        flying = n = 0
        for b in self.pending:
            if b.acked:
                continue
            n += 1
            if n > limit:
                break
            if b.in_flight:
                if out:
                    return []
                flying += 1
            else:
                out.append(b)
        if flying != self.in_flight:
            return []
        return out

    def waiting_behind_failure(self, batch: PendingBatch) -> bool:
        """Whether an earlier batch is neither acknowledged nor in flight: its request failed, so ``batch``
        (sent after it) was judged without it (an out-of-order answer is that earlier failure's echo)."""
        for b in self.pending:
            if b is batch:
                return False
            if not b.acked and not b.in_flight:
                return True
        return False

    def add_pending(self, batch: PendingBatch) -> None:
        self.pending.append(batch)
        self.pending_size += batch.size

    def drop_from(self, batch: PendingBatch) -> list[PendingBatch]:
        """Remove ``batch`` and every batch after it; returns them (empty if ``batch`` is not pending)."""
        pending = self.pending
        for i, b in enumerate(pending):
            if b is batch:
                dropped = [pending.pop() for _ in range(len(pending) - i)][::-1]
                for d in dropped:
                    d.dropped = True
                self.pending_size -= sum(d.size for d in dropped)
                return dropped
        return []

    def drop_acked_prefix(self) -> list[PendingBatch]:
        """Remove the acknowledged batches at the front (the acknowledged prefix moves); returns them."""
        pending = self.pending
        done = []
        while pending and pending[0].acked:
            b = pending.popleft()
            self.pending_size -= b.size
            self.acked_live = b.end_offset
            self.acked_offline = b.offline_offset + b.header.last_offset_delta + 1
            self.acked_seq = next_sequence(b.sequence, b.header)
            done.append(b)
        return done

    def fetch_failed(self, now: float) -> float:
        self.fetch_failures += 1
        self.fetch_retry_at = now + backoff(self.fetch_failures)
        return self.fetch_retry_at

    def produce_failed(self, now: float) -> float:
        self.produce_failures += 1
        self.produce_retry_at = now + backoff(self.produce_failures)
        return self.produce_retry_at


def backoff(failures: int) -> float:
    """Exponential back-off: 0.1 s, 0.2 s, ... capped at 5 s (a link cut of minutes costs no CPU)."""
    return min(MAX_BACKOFF_S, MIN_BACKOFF_S * (2 ** min(max(failures - 1, 0), 10)))
