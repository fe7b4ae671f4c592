"""MetadataCache: this broker's view of the cluster (live brokers, topic assignments, partition states,
the controller), fed by ZooKeeper watches.

Snapshots are replaced whole (a single reference assignment), so the event loop reads them without locks
while the registry's notifier thread swaps in new ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ferry.zk.znodes import BrokerInfo, PartitionState, TopicInfo


class MetadataCache:
    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self._listeners: list[Callable[[dict[str, TopicInfo]], None]] = []
        self._broker_listeners: list[Callable[[dict[int, BrokerInfo]], None]] = []
        # (topic, partition) -> (state, znode version): the partition state watcher's own dict
        self.states: dict[tuple[str, int], tuple[PartitionState, int]] = {}
        self.controller: Callable[[], int] | None = None  # who holds /controller (set by KafkaServer)
        self.topics_seen = threading.Event()
        self.brokers_seen = threading.Event()

    def add_topics_listener(self, callback: Callable[[dict[str, TopicInfo]], None]) -> None:
        self._listeners.append(callback)

    def add_brokers_listener(self, callback: Callable[[dict[int, BrokerInfo]], None]) -> None:
        self._broker_listeners.append(callback)

    def update_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        self.brokers = dict(brokers)
        for cb in self._broker_listeners:
            cb(self.brokers)
        self.brokers_seen.set()

    def update_topics(self, topics: dict[str, TopicInfo]) -> None:
        self.topics = dict(topics)
        for cb in self._listeners:
            cb(self.topics)
        self.topics_seen.set()

    def state(self, topic: str, partition: int) -> PartitionState | None:
        entry = self.states.get((topic, partition))
        return None if entry is None else entry[0]

    def leader(self, topic: str, partition: int) -> int | None:
        """The partition's current leader (-1: offline); None if the topic or partition is unknown."""
        info = self.topics.get(topic)
        if info is None or partition not in info.partitions:
            return None
        st = self.state(topic, partition)
        return -1 if st is None else st.leader

    def controller_id(self) -> int:
        """The broker holding /controller (-1 while there is none)."""
        return self.controller() if self.controller is not None else -1
