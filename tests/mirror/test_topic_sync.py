"""Offline topics get the mirror's replication factor (MirrorMaker 2's replication.factor): by default the
smaller of 3 and the offline brokers registered when the topic is created, or --target-replication-factor;
never the live topic's, and without the live durability settings."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from mirror_harness import MirrorProcess, clusters_with_topics, committed_to_end, produce, read_log, wait_for

from ferry.mirror.mirror_maker import MirrorConfig
from ferry.mirror.status import mirror_status
from ferry.mirror.topic_sync import TopicSync, default_replication_factor
from ferry.zk.cluster_registry import ClusterRegistry


def _registries(zk: str, n: int) -> list[ClusterRegistry]:
    regs = []
    for i in range(1, n + 1):
        reg = ClusterRegistry(zk, timeout=4).start()
        reg.register_broker(i, "127.0.0.1", 19100 + i, "offline")
        regs.append(reg)
    return regs


def test_default_is_min_3_and_the_offline_brokers_at_creation(zk_server) -> None:
    base = f"{zk_server.connect}/t/sync{time.monotonic_ns()}"
    live = ClusterRegistry(f"{base}/live").start()
    offline = ClusterRegistry(f"{base}/offline").start()
    brokers = [*_registries(f"{base}/live", 1)]
    try:
        live.create_topic("views", 3, {"retention.ms": "3600000", "min.insync.replicas": "1",
                                       "unclean.leader.election.enable": "true"})
        sync = TopicSync(live, offline, lambda t: True, always=("_audit",))
        assert not sync.sync_once(live.topics())  # no offline broker yet: nothing created, retried later
        assert offline.topics() == {}

        brokers += _registries(f"{base}/offline", 2)
        assert sync.sync_once(live.topics())
        views = offline.topic("views")
        assert {p: len(r) for p, r in views.replicas.items()} == {0: 2, 1: 2, 2: 2}  # min(3, 2 brokers)
        assert views.config == {"retention.ms": "3600000"}  # the offline cluster's own durability settings
        assert len(offline.topic("_audit").replicas[0]) == 2

        for i in (3, 4):  # four offline brokers now: a new topic gets 3 replicas, not 4
            reg = ClusterRegistry(f"{base}/offline", timeout=4).start()
            reg.register_broker(i, "127.0.0.1", 19100 + i, "offline")
            brokers.append(reg)
        live.create_topic("clicks", 2)
        live.add_partitions("views", 4)
        assert sync.sync_once(live.topics())
        assert [len(r) for r in offline.topic("clicks").replicas.values()] == [3, 3]
        assert len(offline.topic("views").replicas[3]) == 2  # grown with the topic's own factor

        # an explicit factor; more than the offline brokers: refused and retried until they are there
        fixed = TopicSync(live, offline, lambda t: True, replication_factor=1)
        live.create_topic("one", 1)
        assert fixed.sync_once(live.topics())
        assert len(offline.topic("one").replicas[0]) == 1
        big = TopicSync(live, offline, lambda t: True, replication_factor=5)
        live.create_topic("five", 1)
        assert not big.sync_once(live.topics())
        assert offline.topic("five") is None
        extra = ClusterRegistry(f"{base}/offline", timeout=4).start()
        extra.register_broker(5, "127.0.0.1", 19105, "offline")
        brokers.append(extra)
        assert big.sync_once(live.topics())
        assert len(offline.topic("five").replicas[0]) == 5
    finally:
        for reg in [*brokers, live, offline]:
            reg.stop()
    assert [default_replication_factor(n) for n in (0, 1, 2, 3, 7)] == [1, 1, 2, 3, 3]


def test_the_flag() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        MirrorConfig("a:1/x", "b:1/y", ".*", target_replication_factor=0).validate()
    out = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "--help"], capture_output=True, text=True,
                         timeout=60).stdout
    assert "--target-replication-factor" in out
    p = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "--source-zookeeper", "a:1/x",
                        "--target-zookeeper", "b:1/y", "--include", ".*", "--target-replication-factor", "0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--target-replication-factor must be at least 1" in p.stderr


@pytest.mark.slow
def test_mirror_creates_replicated_offline_topics_and_copies_into_them(cluster_factory, tmp_path: Path) -> None:
    live, offline = clusters_with_topics(cluster_factory, {"events": 2, "_audit": 1}, offline_brokers=3)
    mirror = MirrorProcess(tmp_path / "mirror.log", live.zk_connect, offline.zk_connect, "events",
                           "--target-replication-factor", "2", "--commit-interval", "0.5").start()
    try:
        produce(live.bootstrap, "events", 2, 1000)
        wait_for(lambda: committed_to_end(mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror"),
                                          ["events"]), 90, "the mirror to copy everything")
        with ClusterRegistry(offline.zk_connect) as reg:
            for topic, n in (("events", 2), ("_audit", 1)):
                assert [len(reg.topic(topic).replicas[p]) for p in range(n)] == [2] * n
                wait_for(lambda t=topic: all(len(s.isr) == 2 for s in reg.partition_states(t).values()),
                         30, f"the ISR of {topic}")
        src = read_log(live.bootstrap, {"events": 2})
        dst = read_log(offline.bootstrap, {"events": 2})
        assert sum(map(len, src.values())) == 1000 and dst == src
    finally:
        mirror.stop()
    assert "replication factor 2" in mirror.log_text()
