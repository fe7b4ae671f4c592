"""One owned live partition: where to fetch next, what is in flight to the offline cluster, and the offset
that is safe to commit (everything before it acknowledged by the offline cluster)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ferry.wire.record.record_batch import RecordBatchHeader

TopicPartition = tuple[str, int]

INITIAL_FETCH_BYTES = 1 << 20
MAX_FETCH_BYTES = 64 << 20
MIN_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0


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

    def view(self) -> memoryview:
        return memoryview(self.buf)[self.start:self.start + self.size]


@dataclass(slots=True, eq=False)
class PartitionMirror:
    topic: str
    partition: int
    fetch_offset: int | None  # None: no committed offset yet, start at the live log start
    pending: deque[PendingBatch] = field(default_factory=deque)
    pending_size: int = 0  # bytes in `pending`
    high_watermark: int = -1
    fetch_bytes: int = INITIAL_FETCH_BYTES
    fetch_sent_offset: int | None = None  # the offset of the fetch in flight (its answer is stale otherwise)
    fetch_retry_at: float = 0.0
    produce_retry_at: float = 0.0
    fetch_failures: int = 0
    produce_failures: int = 0

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

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

    def add_pending(self, batch: PendingBatch) -> None:
        self.pending.append(batch)
        self.pending_size += batch.size

    def drop_from(self, batch: PendingBatch) -> list[PendingBatch]:
        """Remove ``batch`` and every batch after it; returns them (empty if ``batch`` is not pending)."""
        pending = self.pending
        for i, b in enumerate(pending):
            if b is batch:
                dropped = [pending.pop() for _ in range(len(pending) - i)][::-1]
                self.pending_size -= sum(d.size for d in dropped)
                return dropped
        return []

    def drop_acked_prefix(self) -> None:
        pending = self.pending
        while pending and pending[0].acked:
            self.pending_size -= pending.popleft().size

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
