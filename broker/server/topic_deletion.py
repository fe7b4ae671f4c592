"""Deleting the logs of deleted topics on every broker that holds a replica of them.

The registry's topic watch delivers whole snapshots; a topic present in one snapshot and gone from the next
was deleted (DeleteTopics, ``ferry topics delete``): this broker stops replicating its partitions (fetchers
removed, Partition objects dropped) and deletes their logs (LogManager.delete_log: renamed ``*-delete``
first, then removed). Only topics seen to disappear while the broker watches are deleted: a log whose topic
is unknown at start-up is left alone (a broker pointed at the wrong chroot must not wipe its disk); such
strays stay on disk until removed by hand (docs/broker.md).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor

from ferry.broker.log.log_manager import LogManager
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.zk.znodes import TopicInfo

log = logging.getLogger(__name__)


class TopicDeletion:
    """A topics listener of the MetadataCache; acts on the event loop."""

    def __init__(self, replicas: ReplicaManager, log_manager: LogManager, executor: Executor) -> None:
        self.replicas = replicas
        self.log_manager = log_manager
        self.executor = executor
        self.loop: asyncio.AbstractEventLoop | None = None
        self._known: set[str] | None = None  # None until the first snapshot

    def start(self, loop: asyncio.AbstractEventLoop, metadata: MetadataCache) -> None:
        self.loop = loop
        self._known = set(metadata.topics) if metadata.topics_seen.is_set() else None
        metadata.add_topics_listener(self.on_topics)

    def on_topics(self, topics: dict[str, TopicInfo]) -> None:
        """Registry notifier thread: note which topics went away and hand them to the loop."""
        known, self._known = self._known, set(topics)
        if known is None or self.loop is None:
            return
        gone = known - set(topics)
        if gone:
            self.loop.call_soon_threadsafe(self.delete, gone)

    def delete(self, topics: set[str]) -> None:
        """On the loop: drop every replica of ``topics`` here and delete their logs."""
        replicas = self.replicas
        for tp, part in sorted(replicas.partitions.items()):
            if tp[0] in topics:
                replicas.drop(part, delete=True)  # fetcher removed, partition forgotten, log deleted
        for (topic, partition) in sorted(self.log_manager.all_logs()):
            if topic in topics:  # a log without a Partition (no state yet): delete it directly
                replicas.forget_log((topic, partition))
                if self.loop is not None:
                    self.loop.run_in_executor(self.executor, self._delete_log, topic, partition)
        log.info("topic(s) %s deleted: their logs here are being removed", ", ".join(sorted(topics)))

    def _delete_log(self, topic: str, partition: int) -> None:
        try:
            self.log_manager.delete_log(topic, partition)
        except Exception:
            log.exception("deleting the log of %s-%d failed", topic, partition)
