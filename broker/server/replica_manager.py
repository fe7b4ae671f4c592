"""ReplicaManager: the partitions this broker leads and their local logs.

Without replication a partition's first assigned broker is its only replica and leader. Logs for the
partitions assigned here are created as soon as the registry's topic watch reports them; a request for a
partition led elsewhere gets NOT_LEADER_OR_FOLLOWER so the client refreshes its metadata.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ferry.broker.server.metadata_cache import MetadataCache
from ferry.wire.protocol.errors import ErrorCode
from ferry.zk.znodes import TopicInfo

log = logging.getLogger(__name__)


class ReplicaManager:
    def __init__(self, broker_id: int, metadata: MetadataCache, log_manager: Any) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.log_manager = log_manager
        self._logs: dict[tuple[str, int], Any] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        metadata.add_topics_listener(self._on_topics)

    def _on_topics(self, topics: dict[str, TopicInfo]) -> None:
        """Runs on the registry's notifier thread: create logs for newly assigned partitions."""
        for name, info in topics.items():
            config = dict(info.config)
            changed = name in self._configs and self._configs[name] != config
            self._configs[name] = config
            for partition, leader in info.partitions.items():
                if leader != self.broker_id:
                    continue
                try:
                    if (name, partition) not in self._logs:
                        self._open(name, partition, info)
                    elif changed:
                        self.log_manager.get_or_create(name, partition, config)
                        log.info("applied new config of %s-%d: %s", name, partition, config)
                except Exception:
                    log.exception("cannot create or update the log of %s-%d", name, partition)

    def _open(self, topic: str, partition: int, info: TopicInfo) -> Any:
        with self._lock:
            lg = self._logs.get((topic, partition))
            if lg is None:
                lg = self.log_manager.get_or_create(topic, partition, dict(info.config))
                self._logs[(topic, partition)] = lg
                log.info("serving partition %s-%d", topic, partition)
            return lg

    def leader_log(self, topic: str, partition: int) -> tuple[Any, int]:
        """(log, NONE) when this broker leads the partition, else (None, error code)."""
        lg = self._logs.get((topic, partition))
        info = self.metadata.topics.get(topic)
        if info is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        leader = info.partitions.get(partition)
        if leader is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if leader != self.broker_id:
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if lg is None:
            try:
                lg = self._open(topic, partition, info)
            except Exception:
                log.exception("cannot open the log of %s-%d", topic, partition)
                return None, ErrorCode.KAFKA_STORAGE_ERROR
        return lg, ErrorCode.NONE

