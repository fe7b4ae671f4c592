"""StreamProgress: what the offline cluster acknowledged of a stream's partitions, handed to the committer."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ferry.mirror.partition_mirror import SYNCED, PartitionMirror, PartitionProgress, TopicPartition


class StreamProgress:
    """The hand-over point between a stream's worker thread (``publish``) and the committer's (``take``).

    Per synced partition: the live offset copied up to, the offline offset and sequence after it, its sync
    generation and the audit counts acknowledged since the last ``take`` (each count is handed over once);
    and the live high watermark last fetched (for the lag metric).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._progress: dict[TopicPartition, PartitionProgress] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}

    def publish(self, partitions: Iterable[tuple[TopicPartition, PartitionMirror]]) -> None:
        """Record what the offline cluster acknowledged; moves the partitions' counts over."""
        with self._lock:
            for tp, pm in partitions:
                if pm.sync != SYNCED and pm.generation == 0:
                    continue  # never synced: nothing of ours to report
                off = pm.commit_offset()
                p = self._progress.get(tp)
                if p is None or p.generation != pm.generation:
                    p = self._progress[tp] = PartitionProgress(off if off is not None else pm.acked_live,
                                                               pm.acked_offline, pm.acked_seq, pm.generation)
                if pm.sync == SYNCED and off is not None:
                    p.live = off
                p.offline, p.seq = pm.acked_offline, pm.acked_seq
                if pm.counts:
                    p.counts.update(pm.counts)
                    pm.counts.clear()
                if pm.high_watermark >= 0:
                    self._high_watermarks[tp] = pm.high_watermark

    def take(self) -> dict[TopicPartition, PartitionProgress]:
        """Progress of the synced partitions since the last call (their counts are handed over once)."""
        with self._lock:
            out = self._progress
            self._progress = {tp: PartitionProgress(p.live, p.offline, p.seq, p.generation) for tp, p in out.items()}
            return out

    def take_partitions(self, partitions: set[TopicPartition]) -> dict[TopicPartition, PartitionProgress]:
        """The progress of partitions handed back, forgotten here."""
        with self._lock:
            out = {tp: self._progress.pop(tp) for tp in partitions if tp in self._progress}
            for tp in partitions:
                self._high_watermarks.pop(tp, None)
            return out

    def forget(self, tp: TopicPartition) -> None:
        """``tp`` is synced again: its progress so far no longer counts."""
        with self._lock:
            self._progress.pop(tp, None)

    def committable(self) -> dict[TopicPartition, int]:
        with self._lock:
            return {tp: p.live for tp, p in self._progress.items()}

    def high_watermarks(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._high_watermarks)
