"""TopicSync: keep the offline cluster's topics a superset of the mirrored live topics.

A live topic that matches the mirror's filter is created in the offline cluster with the same partition
count and config (retention...); partitions added in live are added in offline. Driven by the live
registry's topic watch, plus a periodic pass that retries whatever failed (no offline broker yet, a
ZooKeeper hiccup). Several mirror processes may race to create a topic: "already exists" is success.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ferry.mirror.sync_loop import SyncLoop
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.errors import InvalidPartitionsError, TopicExistsError
from ferry.zk.znodes import TopicInfo

log = logging.getLogger("ferry.mirror.topics")

RETRY_INTERVAL_S = 5.0


class TopicSync(SyncLoop):
    def __init__(self, source: ClusterRegistry, target: ClusterRegistry, matches: Callable[[str], bool],
                 always: tuple[str, ...] = (), retry_interval_s: float = RETRY_INTERVAL_S) -> None:
        """``always``: topics to have in offline even if live has none yet (the mirror's `_audit`)."""
        super().__init__("ferry-mirror-topic-sync", retry_interval_s)
        self.source = source
        self.target = target
        self.matches = matches
        self.always = always
        self.created: list[str] = []
        self.grown: list[tuple[str, int]] = []
        self._latest: dict[str, TopicInfo] | None = None

    def start(self) -> TopicSync:
        self.source.watch_topics(self._on_live_topics)
        self._thread.start()
        return self

    def _on_live_topics(self, topics: dict[str, TopicInfo]) -> None:
        self._latest = topics
        self.wake()

    def run_pass(self) -> bool:
        live = self._latest
        return live is not None and self.sync_once(live)

    def pass_failed(self, exc: Exception) -> None:
        log.exception("topic sync pass failed; retrying in %.0f s", self.interval_s)

    def sync_once(self, live: dict[str, TopicInfo]) -> bool:
        """One pass; returns True when every mirrored live topic exists in offline with enough partitions."""
        offline = self.target.topics()
        ok = True
        wanted: dict[str, tuple[int, dict[str, str]]] = {}
        for name, info in live.items():
            if self.matches(name):
                wanted[name] = (info.partition_count, dict(info.config))
        for name in self.always:
            wanted.setdefault(name, (1, {}))
        for name, (count, config) in sorted(wanted.items()):
            have = offline.get(name)
            try:
                if have is None:
                    try:
                        self.target.create_topic(name, count, config or None)
                        self.created.append(name)
                        log.info("created offline topic %s (%d partitions, config %s)", name, count, config)
                    except TopicExistsError:
                        pass  # another mirror process was faster
                elif have.partition_count < count:
                    try:
                        self.target.add_partitions(name, count)
                        self.grown.append((name, count))
                        log.info("offline topic %s: %d -> %d partitions", name, have.partition_count, count)
                    except InvalidPartitionsError:
                        latest = self.target.topic(name)
                        if latest is None or latest.partition_count < count:
                            raise
            except Exception as e:
                ok = False
                log.warning("cannot create/grow offline topic %s yet (%s); will retry", name, e)
        return ok
