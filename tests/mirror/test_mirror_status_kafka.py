"""`ferry mirror status --bootstrap-server LIVE`: the standalone mirror's rows over the Kafka protocol alone
(OffsetFetch v0 of its ZooKeeper group, ListOffsets, Fetch), the same numbers as through --source-zookeeper; the
links need the offline ZooKeeper and the output says so (real ZooKeeper, real brokers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from mirror_harness import clusters_with_topics, produce

from ferry.client.group_store import write_offset
from ferry.client.wire_client import WireClient
from ferry.mirror.status import OWNER_UNKNOWN
from ferry.wire.protocol import offset_fetch
from tests.client.group_helpers import zk_client

ROOT = Path(__file__).resolve().parents[2]


def ferry(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FERRY_CLIENT_CONFIG", None)
    env.pop("FERRY_ZOOKEEPER", None)
    return subprocess.run([sys.executable, "-m", "ferry.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=60)


def test_status_over_bootstrap_server_matches_zookeeper(cluster_factory) -> None:
    live, offline = clusters_with_topics(cluster_factory, {"views": 2, "clicks": 1})
    produce(live.bootstrap, "views", 2, 400, ts0=int(time.time() * 1000) - 900_000, ts_step_ms=100)
    zk = zk_client(live.zk_connect)
    try:
        write_offset(zk, "ferry-mirror", "views", 0, 120)
        write_offset(zk, "ferry-mirror", "views", 1, 200)
    finally:
        zk.stop()
        zk.close()
    # OffsetFetch v0 is Kafka 0.8.1's read of a ZooKeeper group: the brokers answer it from /consumers/<group>
    wire = WireClient(live.bootstrap, "test")
    try:
        wire.refresh_metadata(None)
        node = next(iter(wire.brokers))
        got = offset_fetch.parse_response(wire.connection(node).request(
            *offset_fetch.encode_zookeeper_group_request("ferry-mirror", [("views", [0, 1]), ("clicks", [0])])))
        other = offset_fetch.parse_response(wire.connection(node).request(
            *offset_fetch.encode_zookeeper_group_request("nobody", [("views", [0])])))
    finally:
        wire.close()
    assert {(t, r.partition): (r.offset, r.error_code) for t, rows in got.items() for r in rows} == \
        {("views", 0): (120, 0), ("views", 1): (200, 0), ("clicks", 0): (-1, 0)}
    assert [(r.offset, r.error_code) for r in other["views"]] == [(-1, 0)]

    over_kafka = ferry("mirror", "status", "--bootstrap-server", live.bootstrap, "--rate-interval", "0", "--json")
    assert over_kafka.returncode == 0, over_kafka.stderr
    over_zk = ferry("mirror", "status", "--source-zookeeper", live.zk_connect, "--target-zookeeper", offline.zk_connect,
                    "--rate-interval", "0", "--json")
    assert over_zk.returncode == 0, over_zk.stderr
    kafka_doc, zk_doc = json.loads(over_kafka.stdout), json.loads(over_zk.stdout)
    fields = ("topic", "partition", "live_end", "copied_to", "lag")
    assert [tuple(p[f] for f in fields) for p in kafka_doc["partitions"]] == \
        [tuple(p[f] for f in fields) for p in zk_doc["partitions"]] == [("views", 0, 200, 120, 80), ("views", 1, 200, 200, 0)]
    kafka_rows = {p["partition"]: p for p in kafka_doc["partitions"]}
    zk_rows = {p["partition"]: p for p in zk_doc["partitions"]}
    assert abs(kafka_rows[0]["lag_seconds"] - zk_rows[0]["lag_seconds"]) < 30 and kafka_rows[0]["lag_seconds"] > 600
    assert kafka_rows[1]["lag_seconds"] == 0.0
    assert kafka_doc["members"] is None and all(p["state"] == OWNER_UNKNOWN for p in kafka_doc["partitions"])
    assert kafka_doc["links"] is None and "--zookeeper OFFLINE_ZK" in kafka_doc["links_note"]
    assert zk_doc["total_lag"] == kafka_doc["total_lag"] == 80
    # the table says what it cannot know; the links come with --zookeeper
    table = ferry("mirror", "status", "--bootstrap-server", live.bootstrap, "--rate-interval", "0")
    assert table.returncode == 0, table.stderr
    assert "members not known over --bootstrap-server" in table.stdout
    assert "mirror links not shown" in table.stdout
    with_links = ferry("mirror", "status", "--bootstrap-server", live.bootstrap, "--zookeeper", offline.zk_connect,
                       "--rate-interval", "0", "--json")
    assert with_links.returncode == 0, with_links.stderr
    assert json.loads(with_links.stdout)["links"] == [] and "links_note" not in json.loads(with_links.stdout)
    # --include lists the matching partitions nobody committed yet, as over ZooKeeper
    inc = ferry("mirror", "status", "--bootstrap-server", live.bootstrap, "--include", "clicks", "--rate-interval",
                "0", "--json")
    assert [(p["topic"], p["copied_to"]) for p in json.loads(inc.stdout)["partitions"]] == [("clicks", None)]


def test_status_needs_a_cluster(tmp_path) -> None:
    for args in ((), ("--source-zookeeper", "127.0.0.1:1/x"),
                 ("--bootstrap-server", "127.0.0.1:1", "--source-zookeeper", "127.0.0.1:1/x")):
        out = ferry("mirror", "status", *args)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
    assert "--bootstrap-server" in ferry("mirror", "status").stderr
    unreachable = ferry("mirror", "status", "--bootstrap-server", "127.0.0.1:1")
    assert unreachable.returncode == 1 and len(unreachable.stderr.strip().splitlines()) == 1, unreachable.stderr
