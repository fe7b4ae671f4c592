"""The embedded mirror: a link stored in the offline ZooKeeper makes the offline leaders pull the live data
themselves (real ZooKeeper, real brokers, the real `ferry mirror link` command, confluent-kafka readers)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from mirror_harness import (
    SteadyProducer,
    audit_counts,
    clusters_with_topics,
    produce,
    read_log,
    wait_for,
    wait_partitions,
)

from ferry.dashboard.app import create_app
from ferry.dashboard.sources import Sources
from ferry.embedded import free_port
from ferry.schemas.registry import SchemaRegistry
from ferry.zk.cluster_registry import ClusterRegistry

pytestmark = pytest.mark.slow

GRAFANA = Path(__file__).resolve().parents[2] / "infra/ansible/roles/prometheus/files/ferry-brokers.grafana.json"


def link(offline, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "link", *args, "--zookeeper",
                           offline.zk_connect], capture_output=True, text=True, timeout=60)


def progress(offline, name: str) -> list[dict]:
    out = link(offline, "describe", name, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["partitions"]


def copied(live, offline, topics: dict[str, int]) -> bool:
    """The offline log of every partition holds exactly the live log's messages (what read_committed sees)."""
    return read_log(offline.bootstrap, topics, timeout=20) == read_log(live.bootstrap, topics, timeout=20)


def test_link_copies_live_topics_identically_in_order(cluster_factory) -> None:
    live, offline = clusters_with_topics(cluster_factory, {"page-views": 3, "secret": 1})
    expected = produce(live.bootstrap, "page-views", 3, 3000, ts_step_ms=400)
    produce(live.bootstrap, "secret", 1, 10)
    schema = '{"type":"record","name":"View","fields":[{"name":"url","type":"string"}]}'
    with SchemaRegistry(live.zk_connect) as live_schemas:
        schema_id = live_schemas.register("page-views", schema)
    # a link whose live cluster cannot be reached holds up nothing (retried with back-off, one WARNING now and then)
    assert link(offline, "create", "dc0", "--source-zookeeper", "127.0.0.1:1/nowhere", "--include", ".*"
                ).returncode == 0
    out = link(offline, "create", "dc1", "--source-zookeeper", live.zk_connect, "--include", ".*",
               "--exclude", "secret")
    assert out.returncode == 0, out.stderr
    wait_partitions(offline.bootstrap, "page-views", 3, timeout=60)
    wait_for(lambda: copied(live, offline, {"page-views": 3}), 90, "the offline copy of page-views")
    # more data while the link runs: copied too, in order, nothing twice
    expected += produce(live.bootstrap, "page-views", 3, 1500, start=3000, compression="zstd")
    wait_for(lambda: copied(live, offline, {"page-views": 3}), 90, "the second batch of page-views")
    wait_for(lambda: audit_counts(offline.bootstrap, "mirror") == expected, 60, "the mirror tier's audit counts")
    rows = read_log(offline.bootstrap, {"page-views": 3})
    assert sum(len(r) for r in rows.values()) == 4500
    assert all(len(set(r)) == len(r) for r in rows.values())
    # the live schema registry is copied with its ids (mirrored payloads carry them)
    with SchemaRegistry(offline.zk_connect) as offline_schemas:
        wait_for(lambda: offline_schemas.id_of(schema) == schema_id, 30, "the schema offline, same id")
    # an excluded topic is not created offline
    listed = subprocess.run([sys.executable, "-m", "ferry.cli", "topics", "list", "--zookeeper",
                             offline.zk_connect], capture_output=True, text=True, timeout=60)
    assert "page-views" in listed.stdout and "secret" not in listed.stdout
    # describe shows every partition copied to the live end
    wait_for(lambda: len(progress(offline, "dc1")) == 3 and all(
        p["copied_to"] == p["live_end"] == 1500 and p["state"] == "copying" for p in progress(offline, "dc1")),
        30, "describe to show the copy at the live end")
    # `ferry mirror status` reports the embedded mirror the same way, from the offline cluster alone
    status = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "status", "--target-zookeeper",
                             offline.zk_connect], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "link dc1: running" in status.stdout and "link dc0: running" in status.stdout
    assert sum(1 for line in status.stdout.splitlines() if line.split()[:1] == ["page-views"]) == 3
    as_json = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "status", "--target-zookeeper",
                              offline.zk_connect, "--json"], capture_output=True, text=True, timeout=60)
    unreachable, running = json.loads(as_json.stdout)["links"]
    assert unreachable["name"] == "dc0" and unreachable["partitions"] == []
    assert running["name"] == "dc1" and {p["partition"] for p in running["partitions"]} == {0, 1, 2}
    assert running["total_lag"] == 0 and all(p["lag_seconds"] == 0.0 and p["state"] == "copying"
                                             for p in running["partitions"])
    # the dashboard's flow page shows the links beside the standalone mirror (the same reads as the status)
    client = TestClient(create_app(Sources(offline.zk_connect, [live.zk_connect])))
    shown = client.get("/api/mirror").json()
    assert shown["links_error"] is None and [lk["name"] for lk in shown["links"]] == ["dc0", "dc1"]
    assert {(p["topic"], p["partition"], p["lag"]) for p in shown["links"][1]["partitions"]} == \
        {("page-views", p, 0) for p in range(3)}
    assert any(key.startswith("link dc1 page-views/") for key in shown["history"][-1]["lag"])
    page = client.get("/flow")
    assert page.status_code == 200 and "<div id=links>" in page.text and "g.links" in page.text


def metrics(port: int) -> dict[str, float]:
    """The offline broker's /metrics of the links: {sample with labels: value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {line.rpartition(" ")[0]: float(line.rpartition(" ")[2]) for line in text.splitlines()
            if line.startswith("ferry_mirror_link_")}


def link_panel_metrics() -> set[str]:
    """The mirror links' metrics the shipped Grafana dashboard reads (the others: tests/broker/test_broker_metrics)."""
    board = json.loads(GRAFANA.read_text())
    exprs = " ".join(t["expr"] for panel in board["panels"] for t in panel["targets"])
    return set(re.findall(r"\bferry_mirror_link_[a-z_]+\b", exprs))


def test_pause_resume_delete(cluster_factory) -> None:
    port = free_port()
    live = cluster_factory(1, "live")
    offline = cluster_factory(1, "offline", extra_args=("--metrics-listen", f"127.0.0.1:{port}"))
    with ClusterRegistry(live.zk_connect) as reg:
        reg.create_topic("clicks", 2)
    wait_partitions(live.bootstrap, "clicks", 2)
    produce(live.bootstrap, "clicks", 2, 400)
    assert link(offline, "create", "dc1", "--source-zookeeper", live.zk_connect, "--include", "clicks"
                ).returncode == 0
    wait_partitions(offline.bootstrap, "clicks", 2, timeout=60)
    wait_for(lambda: copied(live, offline, {"clicks": 2}), 90, "the first copy")
    # the broker's /metrics show each partition's copy (what the dashboard and the alert rules read)
    sample = 'ferry_mirror_link_{}{{link="dc1",partition="{}",topic="clicks"}}'
    wait_for(lambda: all(metrics(port).get(sample.format("copied_to", p)) == 200.0 and
                         metrics(port).get(sample.format("lag_messages", p)) == 0.0 for p in (0, 1)), 30,
             "the link's metrics at the live end")
    wait_for(lambda: all(metrics(port).get(sample.format("lag_seconds", p)) == 0.0 for p in (0, 1)), 30,
             "the lag in seconds at the live end")
    scraped = metrics(port)
    assert scraped['ferry_mirror_link_paused{link="dc1"}'] == 0.0 and scraped['ferry_mirror_link_failed{link="dc1"}'] == 0
    assert all(scraped[sample.format("bytes_total", p)] > 200 * 10 for p in (0, 1))  # each message is > 10 bytes
    assert all(scraped[sample.format("messages_total", p)] == 200 for p in (0, 1))
    served = {name.partition("{")[0] for name in scraped}
    assert {"ferry_mirror_link_lag_seconds", "ferry_mirror_link_messages_total"} <= link_panel_metrics() <= served
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # the one status table: lag in messages and seconds, rate, leader, state, per partition
    as_json = json.loads(link(offline, "describe", "dc1", "--json").stdout)
    assert as_json["total_lag"] == 0 and all(p["lag"] == 0 and p["lag_seconds"] == 0.0 and p["owner"] == "1" and
                                             p["messages_per_s"] is not None for p in as_json["partitions"])
    out = link(offline, "pause", "dc1")
    assert out.returncode == 0 and "paused" in out.stdout, out.stderr
    wait_for(lambda: all(p["state"] == "paused" for p in progress(offline, "dc1")) and progress(offline, "dc1"),
             30, "the leaders to report the link paused")
    assert metrics(port)['ferry_mirror_link_paused{link="dc1"}'] == 1.0
    produce(live.bootstrap, "clicks", 2, 200, start=400)
    time.sleep(4)  # paused: nothing more arrives (the leaders get several passes and fetch rounds to misbehave)
    assert sum(len(r) for r in read_log(offline.bootstrap, {"clicks": 2}).values()) == 400
    assert link(offline, "resume", "dc1").returncode == 0
    wait_for(lambda: copied(live, offline, {"clicks": 2}), 90, "the copy after resume")
    # alter (what a playbook re-run does when the link's settings changed): the link keeps its producer id, so a
    # wider --include adds the new topic and the copied one goes on from its offline log (nothing copied twice)
    with ClusterRegistry(live.zk_connect) as reg:
        reg.create_topic("views", 1)
    wait_partitions(live.bootstrap, "views", 1)
    produce(live.bootstrap, "views", 1, 50)
    same = link(offline, "alter", "dc1", "--include", "clicks")
    assert same.returncode == 0 and "unchanged" in same.stdout, same.stderr
    altered = link(offline, "alter", "dc1", "--include", "clicks|views")
    assert altered.returncode == 0 and "include 'clicks|views'" in altered.stdout, altered.stderr
    wait_partitions(offline.bootstrap, "views", 1, timeout=60)
    wait_for(lambda: copied(live, offline, {"views": 1}), 90, "the topic the altered link added")
    time.sleep(3)  # the restarted link's leaders had their passes over clicks
    assert sum(len(r) for r in read_log(offline.bootstrap, {"clicks": 2}).values()) == 600
    listed = link(offline, "list")
    assert listed.returncode == 0 and listed.stdout.startswith("dc1\trunning\t"), listed.stdout
    pid = json.loads(link(offline, "describe", "dc1", "--json").stdout)["producer_id"]
    assert link(offline, "delete", "dc1").returncode == 0
    # the brokers watch the links: the deleted link stops at once (not at their next pass), its reports go with it
    wait_for(lambda: 'ferry_mirror_link_paused{link="dc1"}' not in metrics(port), 5, "the broker to stop the link")
    produce(live.bootstrap, "clicks", 2, 100, start=600)
    time.sleep(4)
    assert sum(len(r) for r in read_log(offline.bootstrap, {"clicks": 2}).values()) == 600
    gone = link(offline, "describe", "dc1")
    assert gone.returncode == 2 and gone.stderr.count("\n") == 1 and "no mirror link 'dc1'" in gone.stderr
    # created again from the same live cluster: the link takes its producer id back, so its leaders find their
    # copy's end in the offline log and copy only what came since (nothing twice)
    assert link(offline, "create", "dc1", "--source-zookeeper", live.zk_connect, "--include", "clicks"
                ).returncode == 0
    assert json.loads(link(offline, "describe", "dc1", "--json").stdout)["producer_id"] == pid
    wait_for(lambda: copied(live, offline, {"clicks": 2}), 90, "the copy of the re-created link")
    time.sleep(2)
    rows = read_log(offline.bootstrap, {"clicks": 2})
    assert sum(len(r) for r in rows.values()) == 700 and all(len(set(r)) == len(r) for r in rows.values())


def _leader(offline, topic: str, partition: int) -> int:
    with ClusterRegistry(offline.zk_connect) as reg:
        state = reg.partition_states(topic).get(partition)
    return state.leader if state is not None else -1


def test_offline_leader_killed_during_a_stream_copies_exactly_once(cluster_factory) -> None:
    """kill -9 of the offline leader, three times, while live is produced to: the new leader resumes where its
    replicated log says the copy ends; the restarted broker truncates to it. 0 missing, 0 duplicates, in order."""
    live = cluster_factory(1, "live")
    offline = cluster_factory(2, "offline", extra_args=("--zk-session-timeout-ms", "6000"))
    with ClusterRegistry(live.zk_connect) as reg:
        reg.create_topic("events", 2)
    wait_partitions(live.bootstrap, "events", 2)
    assert link(offline, "create", "dc1", "--source-zookeeper", live.zk_connect, "--include", "events"
                ).returncode == 0
    wait_partitions(offline.bootstrap, "events", 2, timeout=60)
    with ClusterRegistry(offline.zk_connect) as reg:
        assert all(len(r) == 2 for r in reg.topic("events").replicas.values())  # RF 2: the copy is replicated
    steady = SteadyProducer(live.bootstrap, {"events": 2}, rate=1500).start()
    try:
        for round_ in range(3):
            time.sleep(3)
            victim = _leader(offline, "events", round_ % 2)
            assert victim in offline.brokers, f"no offline leader of events-{round_ % 2}"
            offline.brokers[victim].kill()
            wait_for(lambda v=victim, p=round_ % 2: _leader(offline, "events", p) not in (v, -1), 60,
                     "a new offline leader")
            time.sleep(2)  # the new leader copies alone for a while
            offline.brokers[victim].start(timeout=60)
        sent = steady.stop()
    finally:
        steady.close()
    wait_for(lambda: copied(live, offline, {"events": 2}), 120, "the offline copy after three kills")
    rows = read_log(offline.bootstrap, {"events": 2})
    assert sum(len(r) for r in rows.values()) == sent
    assert all(len(set(r)) == len(r) for r in rows.values())
    # the books: the mirror tier's counts, published by whichever leader held each range, equal the producer's
    wait_for(lambda: audit_counts(offline.bootstrap, "mirror") == steady.counts, 60,
             "the mirror tier's audit counts to match the producer's")


def test_live_leader_killed_and_back_the_copy_follows_it(cluster_factory) -> None:
    """The live leader of the copied partitions killed with -9 during a stream (live RF 2): the offline leaders
    look the new live leader up and go on from their own logs' end; nothing missing, nothing twice."""
    live = cluster_factory(2, "live", extra_args=("--zk-session-timeout-ms", "6000"))
    offline = cluster_factory(1, "offline")
    with ClusterRegistry(live.zk_connect) as reg:
        reg.create_topic("events", 2, replication_factor=2)
    wait_partitions(live.bootstrap, "events", 2)
    assert link(offline, "create", "dc1", "--source-zookeeper", live.zk_connect, "--include", "events"
                ).returncode == 0
    wait_partitions(offline.bootstrap, "events", 2, timeout=60)
    steady = SteadyProducer(live.bootstrap, {"events": 2}, rate=1000).start()
    try:
        time.sleep(3)
        victim = _leader(live, "events", 0)
        live.brokers[victim].kill()
        wait_for(lambda: _leader(live, "events", 0) not in (victim, -1), 60, "a new live leader")
        time.sleep(3)
        live.brokers[victim].start(timeout=60)
        time.sleep(2)
        sent = steady.stop()
    finally:
        steady.close()
    wait_for(lambda: copied(live, offline, {"events": 2}), 120, "the offline copy after the live leader's kill")
    rows = read_log(offline.bootstrap, {"events": 2})
    assert sum(len(r) for r in rows.values()) == sent
    assert all(len(set(r)) == len(r) for r in rows.values())


def test_two_live_datacenters_feed_one_offline_topic(cluster_factory) -> None:
    """One link per live datacenter into the same offline topic: each link's batches carry its own producer
    id, so each has its own copy position; the offline partition holds both datacenters' messages, each once
    and in its datacenter's order."""
    east, west = cluster_factory(1, "live"), cluster_factory(1, "live")
    offline = cluster_factory(1, "offline")
    for dc in (east, west):
        with ClusterRegistry(dc.zk_connect) as reg:
            reg.create_topic("events", 1)
        wait_partitions(dc.bootstrap, "events", 1)
    produce(east.bootstrap, "events", 1, 500, tag="east-")
    produce(west.bootstrap, "events", 1, 300, tag="west-")
    for name, dc in (("east", east), ("west", west)):
        assert link(offline, "create", name, "--source-zookeeper", dc.zk_connect, "--include", "events"
                    ).returncode == 0
    wait_partitions(offline.bootstrap, "events", 1, timeout=60)
    produce(east.bootstrap, "events", 1, 200, start=500, tag="east-")
    want = {tag: read_log(dc.bootstrap, {"events": 1})[("events", 0)] for tag, dc in (("east-", east), ("west-", west))}

    def split() -> dict[str, list]:
        rows = read_log(offline.bootstrap, {"events": 1}, timeout=20)[("events", 0)]
        return {tag: [r for r in rows if r[1].startswith(tag.encode())] for tag in want}

    wait_for(lambda: split() == want, 90, "both datacenters' messages offline, each once and in order")
    assert sum(len(v) for v in want.values()) == 1000
    assert len(read_log(offline.bootstrap, {"events": 1})[("events", 0)]) == 1000
