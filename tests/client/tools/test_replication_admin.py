"""`ferry topics elect-leaders` and `ferry topics reassign` against three real brokers: the controller takes
the requests the tool writes, leadership goes back to the preferred replicas, and raising a topic's
replication factor 1 -> 3 copies every message to the new replicas (byte-identical logs) while producers
keep writing."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from ferry.cli import main
from ferry.zk.znodes import PREFERRED_ELECTION_PATH, REASSIGN_PARTITIONS_PATH

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "broker"))
from replication_helpers import FAST, ReplicatedCluster, batches_on_disk  # noqa: E402

pytestmark = pytest.mark.slow

# no rebalance timer: leadership moves only when the test asks for it
NO_REBALANCE = (*FAST, "--override", "auto.leader.rebalance.enable=false")


@pytest.fixture
def three(zk_server, tmp_path):
    c = ReplicatedCluster(zk_server.connect, tmp_path, 3, NO_REBALANCE)
    yield c
    c.stop()


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    """acks=all, idempotent, uncompressed (the values are looked for in the segment files); all or fail."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "compression.type": "none", "message.timeout.ms": 60_000})
    errors: list = []
    for v in values:
        p.produce(topic, v, partition=partition, on_delivery=lambda err, _m: err and errors.append(err))
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors


def consume(bootstrap: str, topic: str, partition: int, expect: int, timeout: float = 30.0) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "admin-test", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert m.error() is None, m.error()
            out.append(m.value())
    finally:
        c.close()
    return out


def test_elect_leaders_moves_leadership_back_and_says_when_it_cannot(three, capsys) -> None:
    topic = "pl"
    reg = three.registry
    reg.create_topic_with_assignment(topic, {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
    three.wait_isr(topic, 3, 3)
    three.brokers[1].stop()  # controlled shutdown: partition 0's leadership moves to 2 or 3
    three.brokers[1].start(timeout=60)
    three.wait_isr(topic, 3, 3, timeout=60)
    moved_to = three.state(topic, 0).leader
    assert moved_to in (2, 3)  # and it stays there: no rebalance timer

    capsys.readouterr()
    assert main(["topics", "elect-leaders", "--topic", topic, "--zookeeper", three.zk]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Topic: pl\tPartition: 0\tPreferred: 1\tLeader before: {moved_to}\tLeader after: 1\telected"
    assert out[1].endswith("Leader before: 2\tLeader after: 2\talready preferred")
    assert out[-1] == "Successfully completed preferred leader election for 1 partition(s)."
    assert three.state(topic, 0).leader == 1
    assert reg.client.exists(PREFERRED_ELECTION_PATH) is None

    # broker 2 dies: partition 1 is led by another replica and 2 leaves the ISR: it cannot lead again
    three.kill(2)
    three.wait_state(topic, 1, lambda s: s.leader not in (2, -1) and 2 not in s.isr, 30, "2 out of the ISR")
    assert main(["topics", "elect-leaders", "--topic", topic, "--partition", "1", "--zookeeper", three.zk]) == 1
    captured = capsys.readouterr()
    assert "NOT elected: preferred replica 2 is not in the ISR" in captured.out
    assert "1 partition(s) not led by their preferred replica" in captured.err
    assert reg.client.exists(PREFERRED_ELECTION_PATH) is None  # the controller took it all the same


def test_raise_the_replication_factor_from_1_to_3_with_data(three, capsys, tmp_path) -> None:
    topic = "raise"
    reg = three.registry
    before = reg.create_topic(topic, 2, replication_factor=1).replicas
    three.wait_isr(topic, 2, 1)
    sent = {p: [f"{topic}-{p}-{i:05d}|".encode() for i in range(1000)] for p in (0, 1)}
    for p in (0, 1):
        produce(three.bootstrap, topic, p, sent[p][:500])

    capsys.readouterr()
    assert main(["topics", "reassign", "--generate", "--topics", topic, "--broker-list", "1,2,3",
                 "--replication-factor", "3", "--zookeeper", three.zk]) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out.strip().splitlines()[-1])
    target = {e["partition"]: tuple(e["replicas"]) for e in json.loads(plan.read_text())["partitions"]}
    assert all(target[p][0] == before[p][0] and sorted(target[p]) == [1, 2, 3] for p in (0, 1))
    assert main(["topics", "reassign", "--execute", "--reassignment-json-file", str(plan),
                 "--zookeeper", three.zk]) == 0
    for p in (0, 1):  # producers keep writing while the new replicas copy
        produce(three.bootstrap, topic, p, sent[p][500:])

    deadline = time.monotonic() + 90
    while main(["topics", "reassign", "--verify", "--reassignment-json-file", str(plan),
                "--zookeeper", three.zk]) != 0:
        assert time.monotonic() < deadline, capsys.readouterr().out
        time.sleep(0.5)
    assert capsys.readouterr().out.count("is complete.") >= 2
    assert reg.topic(topic).replicas == target
    deadline = time.monotonic() + 30
    while reg.client.exists(REASSIGN_PARTITIONS_PATH) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert reg.client.exists(REASSIGN_PARTITIONS_PATH) is None

    assert main(["topics", "describe", topic, "--under-replicated", "--zookeeper", three.zk]) == 0
    assert capsys.readouterr().out == ""
    for p in (0, 1):
        assert three.state(topic, p).leader == before[p][0]  # the leader never moved
        assert consume(three.bootstrap, topic, p, len(sent[p])) == sent[p]
        # every message on all three replicas, whose logs are the same batches byte for byte
        deadline = time.monotonic() + 15
        while True:
            logs = {b: batches_on_disk(three.log_dir(b, topic, p)) for b in (1, 2, 3)}
            if logs[1] == logs[2] == logs[3] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert logs[1] == logs[2] == logs[3]
        data = b"".join(batch for _, batch in logs[1])
        missing = [v for v in sent[p] if v not in data]
        assert not missing, missing[:5]
