"""TopicSync: keep the offline cluster's topics a superset of the mirrored live topics.

A live topic that matches the mirror's filter is created in the offline cluster with the same partition
count and config (retention...); partitions added in live are added in offline. Driven by the live
registry's topic watch, plus a periodic pass that retries whatever failed (no offline broker yet, fewer
offline brokers than the replication factor, a ZooKeeper hiccup). Several mirror processes may race to
create a topic: "already exists" is success.

Replication is the offline cluster's own business, as in MirrorMaker 2: a topic is created there with the
mirror's ``replication_factor`` (MM2's ``replication.factor``), by default the smaller of 3 and the number
of offline brokers registered at that moment, never the live topic's; and the live durability settings
``min.insync.replicas`` and ``unclean.leader.election.enable`` are not copied (MM2's default config filter
drops them too): a live ``min.insync.replicas=2`` on a one-broker offline cluster would refuse every
acks=all produce of the mirror. The offline brokers' own defaults apply.
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
MAX_DEFAULT_REPLICATION_FACTOR = 3
NOT_COPIED = frozenset({"min.insync.replicas", "unclean.leader.election.enable"})  # the target's own settings


def default_replication_factor(offline_brokers: int) -> int:
    """min(3, offline brokers registered now), at least 1 (with none, creating fails and is retried)."""
    return max(1, min(MAX_DEFAULT_REPLICATION_FACTOR, offline_brokers))


class TopicSync:
    def __init__(self, source: ClusterRegistry, target: ClusterRegistry, matches: Callable[[str], bool],
                 always: tuple[str, ...] = (), retry_interval_s: float = RETRY_INTERVAL_S,
                 replication_factor: int | None = None) -> None:
        """``always``: topics to have in offline even if live has none yet (the mirror's `_audit`);
        ``replication_factor``: of the topics created offline (None: see default_replication_factor)."""
        self.loop = SyncLoop("ferry-mirror-topic-sync", retry_interval_s, self.run_pass, self.pass_failed)
        self.replication_factor = replication_factor
        self.source = source
        self.target = target
        self.matches = matches
        self.always = always
        self.created: list[str] = []
        self.grown: list[tuple[str, int]] = []
        self._latest: dict[str, TopicInfo] | None = None

    def start(self) -> TopicSync:
        self.source.watch_topics(self._on_live_topics)
        self.loop.start()
        return self

    def stop(self) -> None:
        self.loop.stop()

    def _on_live_topics(self, topics: dict[str, TopicInfo]) -> None:
        self._latest = topics
        self.loop.wake()

    def run_pass(self) -> bool:
        live = self._latest
        return live is not None and self.sync_once(live)

    def pass_failed(self, exc: Exception) -> None:
        log.exception("topic sync pass failed; retrying in %.0f s", self.loop.interval_s)

    def sync_once(self, live: dict[str, TopicInfo]) -> bool:
        """One pass; returns True when every mirrored live topic exists in offline with enough partitions."""
        offline = self.target.topics()
        ok = True
        wanted: dict[str, tuple[int, dict[str, str]]] = {}
        for name, info in live.items():
            if self.matches(name):
                wanted[name] = (info.partition_count,
                                {k: v for k, v in info.config.items() if k not in NOT_COPIED})
        for name in self.always:
            wanted.setdefault(name, (1, {}))
        for name, (count, config) in sorted(wanted.items()):
            have = offline.get(name)
            try:
                if have is None:
                    rf = self.replication_factor or default_replication_factor(len(self.target.brokers()))
                    try:
                        self.target.create_topic(name, count, config or None, replication_factor=rf)
                        self.created.append(name)
                        log.info("created offline topic %s (%d partitions, replication factor %d, config %s)",
                                 name, count, rf, config)
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
