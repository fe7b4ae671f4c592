"""Watches on partition state znodes: every change (an election, an ISR shrink) reaches the listeners.

This is how the controller's decisions reach the brokers (instead of Kafka's LeaderAndIsr request): every
broker watches the state of each partition it knows, and the controller watches them all. kazoo's
DataWatch re-reads a znode after each change and after a new session, so nothing is missed across a
ZooKeeper session expiry. Listeners run on kazoo's callback thread and must not block.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.recipe.watchers import DataWatch

from ferry.zk.znodes import PartitionState, partition_state_path

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# (topic-partition, state or None when the znode is missing, znode version or -1)
StateListener = Callable[[TopicPartition, PartitionState | None, int], None]


class PartitionStateWatcher:
    def __init__(self, client_getter: Callable[[], Any]) -> None:
        self._client_getter = client_getter
        self._listeners: list[StateListener] = []
        self._watched: set[TopicPartition] = set()
        self._lock = threading.Lock()
        self.states: dict[TopicPartition, tuple[PartitionState, int]] = {}

    def add_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def watch(self, partitions: Iterable[TopicPartition]) -> None:
        """Watch exactly ``partitions`` from now on (new ones are read at once; dropped ones are forgotten)."""
        wanted = set(partitions)
        with self._lock:
            added = wanted - self._watched
            for tp in self._watched - wanted:
                self.states.pop(tp, None)
            self._watched = wanted
        client = self._client_getter()
        for tp in sorted(added):
            DataWatch(client, partition_state_path(*tp), self._make_callback(tp))

    def record(self, tp: TopicPartition, state: PartitionState, version: int) -> None:
        """A state this process itself just wrote (its watch event follows; an older one never wins)."""
        current = self.states.get(tp)
        if tp in self._watched and (current is None or current[1] < version):
            self.states[tp] = (state, version)

    def _make_callback(self, tp: TopicPartition) -> Callable[..., bool]:
        def on_data(data: bytes | None, stat: Any) -> bool:
            if tp not in self._watched:
                return False  # forgotten: stop this DataWatch
            state: PartitionState | None = None
            version = -1
            if data is not None and stat is not None:
                try:
                    state = PartitionState.decode(data, f"state of {tp[0]}-{tp[1]}")
                    version = stat.version
                except ValueError as e:
                    log.error("ignoring an unreadable partition state: %s", e)
            if state is None:
                self.states.pop(tp, None)
            else:
                current = self.states.get(tp)
                if current is not None and current[1] > version:
                    return True  # our own newer write is already recorded
                self.states[tp] = (state, version)
            for listener in list(self._listeners):
                try:
                    listener(tp, state, version)
                except Exception:
                    log.exception("partition state listener %r failed", listener)
            return True

        return on_data
