"""MirrorFetcher: the mirror's fetcher plugged into the ConsumerConnector (Algorithm 1 stays there).

The connector decides ownership and calls its fetcher with ``start_fetching(infos)`` after claiming
partitions and ``stop_fetching()`` before releasing them, exactly as for its own message-queue fetcher.
Here those calls hand the partitions to the MirrorStreams and take them back: ``stop_fetching`` returns
only when the streams have nothing in flight for them, after their last checkpoints were written
(through ``on_stopped``). Where the next owner starts is decided by its sync against the offline log
(tail_sync.py), not by this hand-over: a process that dies without one loses nothing and duplicates nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from ferry.mirror.mirror_stream import MirrorStream, stream_for
from ferry.mirror.partition_mirror import PartitionProgress, TopicPartition

log = logging.getLogger("ferry.mirror")


class MirrorFetcher:
    def __init__(self, streams: Sequence[MirrorStream],
                 on_stopped: Callable[[dict[TopicPartition, PartitionProgress]], None],
                 on_started: Callable[[dict[TopicPartition, int | None]], None] | None = None) -> None:
        self.streams = list(streams)
        self.on_stopped = on_stopped
        self.on_started = on_started
        self._owned: dict[TopicPartition, int] = {}  # partition -> stream index
        self._lock = threading.Lock()

    def owned(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._owned)

    def start_fetching(self, infos: list) -> None:
        """``infos``: PartitionTopicInfo with topic, partition and fetch_offset (None = no committed offset)."""
        per_stream: dict[int, dict[TopicPartition, int | None]] = {}
        offsets: dict[TopicPartition, int | None] = {(info.topic, info.partition): info.fetch_offset
                                                      for info in infos}
        with self._lock:
            for tp, offset in offsets.items():
                i = stream_for(tp, len(self.streams))
                self._owned[tp] = i
                per_stream.setdefault(i, {})[tp] = offset
        for i, parts in per_stream.items():
            self.streams[i].assign(parts)
        if self.on_started is not None:
            self.on_started(offsets)

    def stop_fetching(self, timeout: float = 30.0) -> None:
        """Blocks until the streams finished their round (bounded by their socket timeouts, hence the
        generous minimum): giving up early would release partitions with batches still in flight."""
        timeout = max(timeout, 120.0)
        with self._lock:
            owned, self._owned = self._owned, {}
        per_stream: dict[int, set[TopicPartition]] = {}
        for tp, i in owned.items():
            per_stream.setdefault(i, set()).add(tp)
        final: dict[TopicPartition, PartitionProgress] = {}
        for i, parts in per_stream.items():
            final.update(self.streams[i].revoke(parts, timeout))
        if owned:
            self.on_stopped(final)

    def close(self, timeout: float = 30.0) -> None:
        self.stop_fetching(timeout)
