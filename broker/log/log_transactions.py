"""Transactions in a partition's log: the last stable offset, the aborted transactions of a fetched range, and
the leader's append of a transaction marker (docs/transactions.md).

The producer state (producer_state.py) tracks which producers have a transaction open here and which
transactions were aborted; it is rebuilt from the batches on disk, so all of this survives a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ferry.broker.log.append_info import AppendInfo
from ferry.broker.log.log_offsets import LogOffsets
from ferry.broker.log.producer_state import ProducerStateManager
from ferry.wire.record.control_batch import build_marker
from ferry.wire.record.record_batch import CONTROL_MASK, TRANSACTIONAL_MASK

MARKER = CONTROL_MASK | TRANSACTIONAL_MASK

Append = Callable[[bytes, int, int], AppendInfo]  # (payload, leader epoch, attribute bits allowed)


class LogTransactions:
    """LSO, aborted transactions, markers: what read_committed consumers and the transaction coordinator ask."""

    def __init__(self, producers: ProducerStateManager, offsets: LogOffsets, lock: threading.RLock,
                 append: Append, clock: Callable[[], int]) -> None:
        self._producers = producers
        self._offsets = offsets
        self._lock = lock
        self._append = append
        self._clock = clock

    @property
    def last_stable_offset(self) -> int:
        """What a read_committed consumer may read (exclusive): the high watermark, or the first offset of the
        earliest transaction not yet decided (or whose marker is not yet below the high watermark)."""
        state = self._producers
        if not state.ongoing and not state.unreplicated:
            return self._offsets.high_watermark
        with self._lock:
            hw = self._offsets.high_watermark
            first = state.first_unstable_offset(hw)
            return hw if first is None or first > hw else first

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [start, end)."""
        state = self._producers
        if not state.aborted:
            return []
        with self._lock:
            return state.aborted_between(start, end)

    def append_marker(self, producer_id: int, producer_epoch: int, committed: bool, leader_epoch: int = -1,
                      coordinator_epoch: int = 0) -> AppendInfo:
        """Append the control batch that ends ``producer_id``'s transaction here (as leader).
        InvalidProducerEpochError when the producer already has a newer epoch here."""
        marker = build_marker(producer_id, producer_epoch, committed, coordinator_epoch, self._clock())
        info = self._append(marker, leader_epoch, MARKER)
        self.forget_stable()
        return info

    def forget_stable(self) -> None:
        """Forget closed transactions whose marker the high watermark passed (keeps that list short on logs
        that no consumer fetches from: followers, idle leaders)."""
        with self._lock:
            self._producers.first_unstable_offset(self._offsets.high_watermark)
