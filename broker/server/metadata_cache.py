"""MetadataCache: this broker's view of the cluster (live brokers, topic assignments), fed by the
registry's ZooKeeper watches.

Snapshots are replaced whole (a single reference assignment), so the event loop reads them without locks
while the registry's notifier thread swaps in new ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ferry.zk.znodes import BrokerInfo, TopicInfo


class MetadataCache:
    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self._listeners: list[Callable[[dict[str, TopicInfo]], None]] = []
        self.topics_seen = threading.Event()
        self.brokers_seen = threading.Event()

    def add_topics_listener(self, callback: Callable[[dict[str, TopicInfo]], None]) -> None:
        self._listeners.append(callback)

    def update_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        self.brokers = dict(brokers)
        self.brokers_seen.set()

    def update_topics(self, topics: dict[str, TopicInfo]) -> None:
        self.topics = dict(topics)
        for cb in self._listeners:
            cb(self.topics)
        self.topics_seen.set()

    def leader(self, topic: str, partition: int) -> int | None:
        """The assigned leader broker id; None if the topic or partition is unknown."""
        info = self.topics.get(topic)
        if info is None:
            return None
        return info.partitions.get(partition)

    def controller_id(self) -> int:
        """No controller exists (ZooKeeper coordinates); report the lowest live broker id, as clients expect one."""
        brokers = self.brokers
        return min(brokers) if brokers else -1
