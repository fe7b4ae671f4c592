"""ReadCommitted: which batches of a read_committed Fetch answer a reader must drop (KIP-98).

A read_committed Fetch returns the log up to the last stable offset, aborted transactions' data included,
with ``aborted_transactions``: (producer id, first offset) of every aborted transaction overlapping the
answer. The reader, not the broker, leaves them out, as Kafka's consumer does: walking the batches in
offset order, a transaction becomes "aborting" once a batch at or after its first offset is reached, its
transactional batches are dropped until its ABORT marker, and markers themselves carry no records for
anyone. One instance per answer (the list describes that answer's range), fed every batch in order.

Raw readers that forward batches (the mirror, the loaders' split reader) share this one rule, so that the
mirror's copy and its resume arithmetic (mirror/tail_sync.py) agree on which live offsets carry data.
"""

from __future__ import annotations

from collections.abc import Iterable

from ferry.wire.record.control_batch import ABORT, control_type
from ferry.wire.record.record_batch import CONTROL_MASK, TRANSACTIONAL_MASK, RecordBatchHeader


class ReadCommitted:
    """The read_committed filter of one Fetch answer (``aborted``: its aborted_transactions, None = none)."""

    __slots__ = ("_pending", "_next", "_aborting")

    def __init__(self, aborted: Iterable[tuple[int, int]] | None) -> None:
        self._pending = sorted((first, pid) for pid, first in aborted or ())
        self._next = 0
        self._aborting: set[int] = set()

    @property
    def aborts(self) -> bool:
        """Whether the answer has aborted transactions at all (without, only control batches are dropped)."""
        return bool(self._pending)

    def drops(self, h: RecordBatchHeader, batch: bytes | bytearray | memoryview, pos: int = 0) -> bool:
        """True when the batch at ``pos`` carries nothing a read_committed reader sees: a control batch (an
        ABORT marker also ends its transaction's dropping) or data of an aborted transaction."""
        pending = self._pending
        while self._next < len(pending) and pending[self._next][0] <= h.last_offset:
            self._aborting.add(pending[self._next][1])
            self._next += 1
        if h.attributes & CONTROL_MASK:
            if control_type(batch, pos) == ABORT:
                self._aborting.discard(h.producer_id)
            return True
        return bool(h.attributes & TRANSACTIONAL_MASK) and h.producer_id in self._aborting
