"""`ferry topics|configs|groups` with `--bootstrap-server` alone (no ZooKeeper on the command line), against two
real ferry brokers: what each action does is checked with a client nobody here wrote (confluent-kafka's
AdminClient, kafka-python's consumer), and the answers come back as Kafka's tools print them, with Kafka's exit
codes (2 for a refused request, 1 for a cluster that does not answer). The APIs themselves, each with several
clients: tests/broker/test_admin_clients.py and test_admin_protocol_gaps.py."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka import KafkaConsumer, KafkaProducer

from tests.client.tools.test_cli import ferry
from tests.conftest import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("adminbs"), f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/live", "live")
    for _ in range(2):
        c.add_broker(extra_args=("--override", "group.initial.rebalance.delay.ms=0"))
    yield c
    c.stop()


def test_topics_create_describe_alter_delete_over_bootstrap(cluster):
    b = ("--bootstrap-server", cluster.bootstrap)
    r = ferry("topics", "create", "bt", "--partitions", "2", "--replication-factor", "2", "--config",
              "retention.ms=60000", *b)
    assert (r.returncode, r.stdout) == (0, "Created topic bt.\n"), r.stderr
    r = ferry("topics", "create", "bt", "--partitions", "2", *b)
    assert r.returncode == 2 and "TOPIC_ALREADY_EXISTS" in r.stderr and len(r.stderr.splitlines()) == 1
    assert ferry("topics", "create", "bt", "--partitions", "2", "--if-not-exists", *b).returncode == 0

    r = ferry("topics", "describe", "bt", *b)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Topic: bt\tPartitionCount: 2\tReplicationFactor: 2\tConfig: retention.ms=60000"
    assert [line.split("\t")[2] for line in lines[1:]] == ["Partition: 0", "Partition: 1"]
    doc = json.loads(ferry("topics", "describe", "bt", "--json", *b).stdout)
    assert all(sorted(p["replicas"]) == [1, 2] and p["alive"] for p in doc["partitions"])

    r = ferry("topics", "elect-leaders", "--topic", "bt", *b)  # ElectLeaders: each is led by its first replica
    assert (r.returncode, r.stdout) == (0, "Valid replica already elected for partitions bt-0, bt-1\n"), r.stderr
    r = ferry("topics", "alter", "bt", "--partitions", "3", *b)
    assert (r.returncode, r.stdout) == (0, "Topic bt: 2 -> 3 partitions.\n"), r.stderr
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    assert len(md.topics["bt"].partitions) == 3
    assert "bt" in ferry("topics", "list", *b).stdout.split()

    r = ferry("topics", "delete", "bt", *b)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 20
    while "bt" in AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the topic is still in the brokers' metadata"
        time.sleep(0.5)
    r = ferry("topics", "describe", "bt", *b)
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = ferry("topics", "delete", "bt", *b)
    assert r.returncode == 2 and "Unknown topic" in r.stderr
    r = ferry("topics", "create", "ra", "--replica-assignment", "2:1,1:2", *b)
    assert r.returncode == 0, r.stderr
    doc = json.loads(ferry("topics", "describe", "ra", "--json", *b).stdout)
    assert [p["replicas"] for p in doc["partitions"]] == [[2, 1], [1, 2]]
    r = ferry("topics", "reassign", "--verify", "--reassignment-json-file", "x.json", *b)
    assert r.returncode == 2 and "--zookeeper" in r.stderr


def test_configs_describe_and_alter_over_bootstrap(cluster):
    b = ("--bootstrap-server", cluster.bootstrap)
    assert ferry("topics", "create", "ct", "--partitions", "1", *b).returncode == 0
    r = ferry("configs", *b, "--entity-type", "topics", "--entity-name", "ct", "--alter",
              "--add-config", "retention.ms=5000,segment.bytes=1048576")
    assert (r.returncode, r.stdout) == (0, "Completed updating config for topic ct.\n"), r.stderr
    res = ConfigResource(ConfigResource.Type.TOPIC, "ct")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept: a dropped client cancels its futures
    got = admin.describe_configs([res])[res].result(20)
    assert (got["retention.ms"].value, got["segment.bytes"].value) == ("5000", "1048576")

    r = ferry("configs", *b, "--topic", "ct", "--alter", "--delete-config", "segment.bytes")
    assert r.returncode == 0, r.stderr
    r = ferry("configs", *b, "--entity-type", "topics", "--entity-name", "ct", "--describe")
    assert r.stdout.splitlines() == [
        "Dynamic configs for topic ct are:",
        "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000}"], r.stderr
    rows = json.loads(ferry("configs", *b, "--topic", "ct", "--describe", "--all", "--json").stdout)
    assert {r["name"]: r["source"] for r in rows}["cleanup.policy"] == "DEFAULT_CONFIG"

    r = ferry("configs", *b, "--entity-type", "brokers", "--entity-name", "1", "--describe", "--all")
    assert r.returncode == 0 and "  broker.id=1 " in r.stdout, r.stderr
    for argv, fragment in [
        (("--entity-type", "brokers", "--entity-name", "1", "--alter", "--add-config", "log.retention.ms=1"),
         "INVALID_REQUEST"),
        (("--entity-type", "clients", "--entity-name", "c", "--alter", "--add-config", "retention.ms=1"),
         "not a client quota"),  # quotas: tests/broker/test_quotas.py
        (("--topic", "nope", "--describe"), "does not exist"),
        (("--topic", "ct", "--alter", "--add-config", "retention.ms=abc"), "retention.ms"),
        (("--topic", "ct", "--alter"), "--add-config"),
    ]:
        r = ferry("configs", *b, *argv)
        assert r.returncode == 2 and fragment in r.stderr and len(r.stderr.splitlines()) == 1, (argv, r.stderr)
    r = ferry("configs", "--bootstrap-server", "127.0.0.1:1", "--timeout", "2", "--topic", "ct", "--describe")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr


def test_groups_over_bootstrap_state_host_reset_delete(cluster):
    b = ("--bootstrap-server", cluster.bootstrap)
    assert ferry("topics", "create", "gt", "--partitions", "2", *b).returncode == 0
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap)
    for i in range(10):
        p.send("gt", value=b"v%d" % i, partition=i % 2)
    p.flush(30)
    p.close(5)
    member = KafkaConsumer("gt", bootstrap_servers=cluster.bootstrap, group_id="bg", auto_offset_reset="earliest",
                           enable_auto_commit=False, session_timeout_ms=6000)
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        for records in member.poll(300).values():
            got.extend(records)
    member.commit()
    try:
        assert len(got) == 10
        r = ferry("groups", "list", "--state", *b)
        assert r.returncode == 0 and r.stdout.splitlines()[1].split() == ["bg", "Stable"], r.stdout + r.stderr
        doc = json.loads(ferry("groups", "describe", "--group", "bg", "--json", *b).stdout)
        assert doc["state"] == "Stable" and [m["host"] for m in doc["members"]] == ["/127.0.0.1"]
        assert {(x["partition"], x["committed"], x["log_end"], x["lag"]) for x in doc["partitions"]} == \
            {(0, 5, 5, 0), (1, 5, 5, 0)}
        r = ferry("groups", "reset", "--group", "bg", "--to-earliest", "--execute", *b)
        assert r.returncode == 2 and "live member" in r.stderr
    finally:
        member.close()
    r = ferry("groups", "reset", "--group", "bg", "--to-offset", "2", "--execute", *b)
    assert r.returncode == 0, r.stderr
    doc = json.loads(ferry("groups", "describe", "--group", "bg", "--json", *b).stdout)
    assert doc["state"] == "Empty" and {x["committed"] for x in doc["partitions"]} == {2}
    assert json.loads(ferry("groups", "list", "--json", *b).stdout) == [
        {"group": "bg", "type": "kafka", "members": 0, "state": "Empty"}]
    assert ferry("groups", "delete", "--group", "bg", *b).returncode == 0
    r = ferry("groups", "describe", "--group", "bg", *b)
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = ferry("groups", "list", "--type", "zookeeper", *b)
    assert r.returncode == 2 and "--zookeeper" in r.stderr
