"""`ferry groups` on the brokers' consumer groups (Kafka's protocol) next to the paper's ZooKeeper groups: a
kafka-python consumer's group is listed, described (state, members, assignments, lag), refused a reset while
it has a member, reset through the coordinator once it left (its next consumer re-reads from the new offsets),
and deleted; an id naming both kinds needs --type for what changes a group."""

from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer

from ferry.client.group_store import write_offset
from ferry.zk.group_offsets import fetch_offsets
from tests.client.conftest import create_topic
from tests.client.group_helpers import zk_client
from tests.client.tools.test_cli import ferry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def consume(bootstrap: str, group: str, n: int) -> tuple[KafkaConsumer, list]:
    c = KafkaConsumer("kt", bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=6000)
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        for records in c.poll(300).values():
            got.extend(records)
    c.commit()
    return c, got


def test_kafka_groups_listed_described_reset_and_deleted(cluster_factory):
    cluster = cluster_factory(n_brokers=2, extra_args=("--override", "group.initial.rebalance.delay.ms=0"))
    zk = cluster.zk_connect
    create_topic(zk, "kt", 2)
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap)
    for i in range(10):
        p.send("kt", value=b"v%d" % i, partition=i % 2)
    p.flush(30)
    p.close(5)

    member, got = consume(cluster.bootstrap, "kg", 10)
    try:
        assert len(got) == 10
        r = ferry("groups", "list", "--zookeeper", zk, "--json")
        assert r.returncode == 0, r.stderr
        assert {"group": "kg", "type": "kafka", "members": 1, "state": "Stable"} in json.loads(r.stdout)
        r = ferry("groups", "describe", "--group", "kg", "--zookeeper", zk, "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["type"] == "kafka" and doc["state"] == "Stable" and len(doc["members"]) == 1
        assert {(a["topic"], a["partition"]) for a in doc["members"][0]["assignment"]} == {("kt", 0), ("kt", 1)}
        assert [(x["partition"], x["committed"], x["log_end"], x["lag"]) for x in doc["partitions"]] == \
            [(0, 5, 5, 0), (1, 5, 5, 0)]
        assert {x["owner"] for x in doc["partitions"]} == {doc["members"][0]["id"]}
        r = ferry("groups", "describe", "--group", "kg", "--zookeeper", zk)
        assert "State: Stable" in r.stdout and "kt-0" in r.stdout and "LAG" in r.stdout, r.stdout
        r = ferry("groups", "reset", "--group", "kg", "--zookeeper", zk, "--to-earliest", "--execute", "--force")
        assert r.returncode == 2 and "live member" in r.stderr, r.stderr
    finally:
        member.close()  # leaves the group

    r = ferry("groups", "reset", "--group", "kg", "--zookeeper", zk, "--to-offset", "2")
    assert r.returncode == 0 and "--execute" in r.stderr, r.stderr
    zkc = zk_client(zk)
    try:
        assert {tp: c.offset for tp, c in fetch_offsets(zkc, "kg").items()} == {("kt", 0): 5, ("kt", 1): 5}
        r = ferry("groups", "reset", "--group", "kg", "--zookeeper", zk, "--to-offset", "2", "--execute")
        assert r.returncode == 0, r.stderr
        assert {tp: c.offset for tp, c in fetch_offsets(zkc, "kg").items()} == {("kt", 0): 2, ("kt", 1): 2}
        again, got = consume(cluster.bootstrap, "kg", 6)
        again.close()
        assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in (0, 1) for o in range(2, 5)]

        # the same id as a paper (ZooKeeper) group too
        write_offset(zkc, "kg", "kt", 0, 1)
        r = ferry("groups", "list", "--zookeeper", zk)
        assert r.stdout.split() == ["kg"], r.stdout
        r = ferry("groups", "describe", "--group", "kg", "--zookeeper", zk, "--json")
        doc = json.loads(r.stdout)
        assert doc["type"] == "both" and doc["zookeeper"]["type"] == "zookeeper" and doc["kafka"]["type"] == "kafka"
        r = ferry("groups", "reset", "--group", "kg", "--zookeeper", zk, "--to-earliest")
        assert r.returncode == 2 and "--type" in r.stderr, r.stderr
        r = ferry("groups", "delete", "--group", "kg", "--zookeeper", zk, "--type", "kafka")
        assert r.returncode == 0, r.stderr
        assert fetch_offsets(zkc, "kg") == {}
        r = ferry("groups", "describe", "--group", "kg", "--zookeeper", zk, "--json")
        assert json.loads(r.stdout)["type"] == "zookeeper"
        r = ferry("groups", "delete", "--group", "kg", "--zookeeper", zk)
        assert r.returncode == 0, r.stderr
        r = ferry("groups", "describe", "--group", "kg", "--zookeeper", zk)
        assert r.returncode == 2 and "does not exist" in r.stderr
    finally:
        zkc.stop()
        zkc.close()
