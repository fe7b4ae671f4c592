"""The mirror copies live topics into the offline cluster byte for byte (real ZooKeeper, real brokers)."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

import pytest
from mirror_harness import audit_counts, committed_to_end, produce, read_log, wait_for, wait_partitions

from broker.zk.cluster_registry import ClusterRegistry
from ferry.embedded import free_port
from mirror.mirror_maker import MirrorConfig, MirrorMaker
from mirror.status import mirror_status

pytestmark = pytest.mark.slow


def test_mirror_copies_topics_identically_and_picks_up_new_ones(cluster_factory) -> None:
    live = cluster_factory(2, "live")
    offline = cluster_factory(2, "offline")
    topics = {"page-views": 3, "clicks": 2, "secret": 1}
    with ClusterRegistry(live.zk_connect) as reg:
        reg.create_topic("page-views", 3, {"retention.ms": "86400000"})
        reg.create_topic("clicks", 2)
        reg.create_topic("secret", 1)
    for t, n in topics.items():
        wait_partitions(live.bootstrap, t, n)
    expected = produce(live.bootstrap, "page-views", 3, 3000, ts_step_ms=400)  # spans several buckets
    expected += produce(live.bootstrap, "clicks", 2, 1500, compression="zstd")
    produce(live.bootstrap, "secret", 1, 10)

    port = free_port()
    mm = MirrorMaker(MirrorConfig(live.zk_connect, offline.zk_connect, include=".*", exclude="secret",
                                  streams=2, metrics_port=port, datacenter="offline"))
    mm.start()
    try:
        # a topic created after the mirror started is picked up without a restart
        with ClusterRegistry(live.zk_connect) as reg:
            reg.create_topic("signups", 4)
        topics["signups"] = 4
        wait_partitions(live.bootstrap, "signups", 4)
        expected += produce(live.bootstrap, "signups", 4, 800, compression="gzip")
        # and so are partitions added to a live topic
        with ClusterRegistry(live.zk_connect) as reg:
            reg.add_partitions("clicks", 3)
        topics["clicks"] = 3
        wait_partitions(live.bootstrap, "clicks", 3)
        expected += produce(live.bootstrap, "clicks", 3, 300, start=10_000, compression="none")

        mirrored = ["page-views", "clicks", "signups"]
        wait_for(lambda: committed_to_end(mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror"),
                                          mirrored), 120, "the mirror to commit every partition to its end")
        with ClusterRegistry(offline.zk_connect) as reg:
            off_topics = reg.topics()
        assert "secret" not in off_topics
        assert {t: off_topics[t].partition_count for t in mirrored} == {t: topics[t] for t in mirrored}
        assert off_topics["page-views"].config.get("retention.ms") == "86400000"

        src = read_log(live.bootstrap, {t: topics[t] for t in mirrored})
        dst = read_log(offline.bootstrap, {t: topics[t] for t in mirrored})
        assert sum(len(v) for v in src.values()) == 3000 + 1500 + 800 + 300
        for tp, rows in src.items():
            assert dst[tp] == rows, f"{tp}: offline differs from live"

        # audit: the mirror tier's counts in the offline _audit equal what was produced
        mm.commit()
        got = audit_counts(offline.bootstrap, "mirror")
        assert got == expected

        # metrics on 127.0.0.1
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'ferry_mirror_messages_total{topic="page-views"} 3000.0' in text
        assert 'ferry_mirror_lag_messages{partition="0",topic="page-views"} 0.0' in text
        assert "ferry_mirror_data_lost_messages" in text

        # ferry mirror status (the CLI) shows owners and zero lag
        out = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "status", "--source-zookeeper",
                              live.zk_connect, "--target-zookeeper", offline.zk_connect],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "total lag: 0 message(s)" in out.stdout
        assert mm.consumer_id in out.stdout and "page-views" in out.stdout
    finally:
        mm.stop()
