"""The mirror copies live topics into the offline cluster byte for byte (real ZooKeeper, real brokers)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections import Counter

import pytest
from mirror_harness import (
    audit_counts,
    describe_partition,
    mirrored_to_end,
    produce,
    read_log,
    wait_for,
    wait_partitions,
)

from ferry.client.audit.bucket import bucket_start
from ferry.client.producer import Producer
from ferry.embedded import free_port
from ferry.mirror.mirror_maker import MirrorConfig, MirrorMaker
from ferry.schemas.registry import SchemaRegistry
from ferry.zk.cluster_registry import ClusterRegistry

pytestmark = pytest.mark.slow

T0 = (int(time.time() * 1000) // 3_600_000 - 2) * 3_600_000 + 595_000  # near a bucket boundary, 2 h ago


def test_mirror_copies_topics_identically_and_picks_up_new_ones(cluster_factory) -> None:
    live = cluster_factory(2, "live")
    offline = cluster_factory(2, "offline")
    topics = {"page-views": 3, "clicks": 2, "secret": 1, "orders": 2, "_audit": 1}
    with ClusterRegistry(live.zk_connect) as reg:
        reg.create_topic("page-views", 3, {"retention.ms": "86400000"})
        reg.create_topic("clicks", 2)
        reg.create_topic("secret", 1)
        reg.create_topic("orders", 2)
        reg.create_topic("_audit", 1)  # app producers publish their audit counts here; mirrored like any topic
    for t, n in topics.items():
        wait_partitions(live.bootstrap, t, n)
    expected = produce(live.bootstrap, "page-views", 3, 3000, ts_step_ms=400)  # spans several buckets
    expected += produce(live.bootstrap, "clicks", 2, 1500, compression="zstd")
    produce(live.bootstrap, "secret", 1, 10)
    # an application using ferry's audited producer (tier "producer", counts published to the live _audit)
    with Producer(live.bootstrap, application="shop", datacenter="live", audit_interval_s=1.0) as app:
        for i in range(700):
            app.send("orders", f"order-{i}".encode(), f"user-{i % 13}".encode(), partition=i % 2,
                     timestamp_ms=T0 + i * 1000)
    expected[("orders", bucket_start(T0))] = 0
    for i in range(700):
        expected[("orders", bucket_start(T0 + i * 1000))] += 1

    schema_v1 = '{"type":"record","name":"Click","fields":[{"name":"url","type":"string"}]}'
    schema_v2 = ('{"type":"record","name":"Click","fields":[{"name":"url","type":"string"},'
                 '{"name":"ref","type":["null","string"],"default":null}]}')
    with SchemaRegistry(live.zk_connect) as live_schemas:
        id1 = live_schemas.register("clicks", schema_v1)

    port = free_port()
    mm = MirrorMaker(MirrorConfig(live.zk_connect, offline.zk_connect, include=".*", exclude="secret",
                                  streams=2, metrics_port=port, datacenter="offline"))
    mm.start()
    try:
        # a schema registered while the mirror runs reaches the offline registry too (same id)
        with SchemaRegistry(live.zk_connect) as live_schemas:
            id2 = live_schemas.register("clicks", schema_v2)
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

        mirrored = ["page-views", "clicks", "signups", "orders", "_audit"]
        wait_for(lambda: mirrored_to_end(live, offline, mirrored), 120, "the mirror to commit every partition to its end")
        with ClusterRegistry(offline.zk_connect) as reg:
            off_topics = reg.topics()
        assert "secret" not in off_topics
        assert {t: off_topics[t].partition_count for t in mirrored} == {t: topics[t] for t in mirrored}
        assert off_topics["page-views"].config.get("retention.ms") == "86400000"

        data = [t for t in mirrored if t != "_audit"]
        src = read_log(live.bootstrap, {t: topics[t] for t in data})
        dst = read_log(offline.bootstrap, {t: topics[t] for t in data})
        assert sum(len(v) for v in src.values()) == 3000 + 1500 + 800 + 300 + 700
        for tp, rows in src.items():
            assert dst[tp] == rows, f"{tp}: offline differs from live ({len(dst[tp])} vs {len(rows)} records; offline " \
                                    f"{describe_partition(offline.zk_connect, offline.bootstrap, *tp)})"

        # the offline schema registry holds the live ids (mirrored payloads keep them)
        with SchemaRegistry(offline.zk_connect) as off_schemas:
            wait_for(lambda: off_schemas.versions("clicks") == [1, 2], 30, "schemas copied to offline")
            assert off_schemas.version("clicks", 1).id == id1 and off_schemas.version("clicks", 2).id == id2

        # audit: the mirror tier's counts in the offline _audit equal what was produced (published now rather
        # than at the next --audit-interval)
        mm.commit(force_audit=True)
        got = audit_counts(offline.bootstrap, "mirror")
        assert got == expected
        # the producer tier's events reached the offline _audit through the mirror: the books balance
        produced = audit_counts(offline.bootstrap, "producer")
        assert produced == Counter({k: v for k, v in expected.items() if k[0] == "orders"})

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
