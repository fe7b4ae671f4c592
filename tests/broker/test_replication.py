"""Replication with real broker processes: placement, ISR, acks=all with min.insync.replicas, followers'
byte-identical copies, leader failover on kill -9, controlled shutdown, unclean election off."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replication_helpers import FAST, ReplicatedCluster, batches_on_disk  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def three(zk_server, tmp_path):
    c = ReplicatedCluster(zk_server.connect, tmp_path, 3, FAST, metrics=True)
    yield c
    c.stop()


def produce_all(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None,
                timeout: float = 60.0) -> tuple[list[tuple[int, int, bytes]], list]:
    """acks=all, idempotent; returns ([(partition, offset, value)] acknowledged, [errors])."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": int(timeout * 1000)})
    acked: list[tuple[int, int, bytes]] = []
    errors: list = []

    def done(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for v in values:
        p.produce(topic, v, key=v, on_delivery=done) if partition is None else \
            p.produce(topic, v, partition=partition, on_delivery=done)
        p.poll(0)
    p.flush(timeout)
    return acked, errors


def consume_all(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 30.0
                ) -> dict[int, list[tuple[int, bytes]]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "replication-test", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout
    n = 0
    try:
        while n < expect and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert m.error() is None, m.error()
            out[m.partition()].append((m.offset(), m.value()))
            n += 1
    finally:
        c.close()
    return out


def test_rf3_placement_isr_acks_all_and_identical_replicas(three):
    topic = "rep"
    info = three.registry.create_topic(topic, 3, {"min.insync.replicas": "2"}, replication_factor=3)
    assert sorted(info.partitions.values()) == [1, 2, 3]  # leaders balanced
    three.wait_isr(topic, 3, 3)
    values = [f"m{i}".encode() for i in range(3000)]
    acked, errors = produce_all(three.bootstrap, topic, values)
    assert not errors and len(acked) == len(values)
    got = consume_all(three.bootstrap, topic, 3, len(values))
    assert sorted(v for vs in got.values() for _, v in vs) == sorted(values)
    # every acks=all batch waited for the ISR: the leaders measured each append -> HW advance
    assert sum(three.metric(b, "ferry_broker_replication_commit_seconds_count") for b in (1, 2, 3)) > 0
    # every replica's log holds the same batches at the same offsets, byte for byte
    time.sleep(1.0)
    for p in range(3):
        st = three.state(topic, p)
        logs = {b: batches_on_disk(three.log_dir(b, topic, p)) for b in (1, 2, 3)}
        assert logs[st.leader], "the leader wrote nothing"
        assert logs[1] == logs[2] == logs[3]


def test_produce_to_a_follower_is_refused_and_min_isr_guards_acks_all(three):
    topic = "guard"
    three.registry.create_topic_with_assignment(topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    three.wait_isr(topic, 1, 3)
    acked, errors = produce_all(three.bootstrap, topic, [b"first"], partition=0)  # every broker acts on it now
    assert acked and not errors
    from broker_wire import WireClient, build_batch, produce

    with WireClient(three.brokers[2].bootstrap) as c:
        res = produce(c, topic, 0, build_batch([b"x"]), acks=1)
        assert res.error == 6  # NOT_LEADER_OR_FOLLOWER
    three.kill(2)
    three.kill(3)
    three.wait_state(topic, 0, lambda s: s.isr == (1,), 30, "ISR shrunk to the leader")
    assert three.metric(1, "ferry_broker_under_replicated_partitions") >= 1
    assert three.metric(1, "ferry_broker_under_min_isr_partitions") >= 1
    with WireClient(three.brokers[1].bootstrap) as c:
        res = produce(c, topic, 0, build_batch([b"y"]), acks=-1)
        assert res.error == 19  # NOT_ENOUGH_REPLICAS: never a false success
        res = produce(c, topic, 0, build_batch([b"z"]), acks=1)
        assert res.error == 0  # acks=1 needs the leader only


def test_leader_kill9_loses_nothing_acknowledged(three):
    topic = "failover"
    three.registry.create_topic(topic, 1, {"min.insync.replicas": "2"}, replication_factor=3)
    three.wait_isr(topic, 1, 3)
    sent: list[bytes] = []
    acked_all: list[tuple[int, int, bytes]] = []
    for round_ in range(3):
        batch = [f"r{round_}-{i}".encode() for i in range(500)]
        sent += batch
        acked, errors = produce_all(three.bootstrap, topic, batch)
        assert not errors, errors
        acked_all += acked
        leader = three.state(topic, 0).leader
        three.kill(leader)
        three.wait_state(topic, 0, lambda s, old=leader: s.leader not in (old, -1), 30, "a new leader")
        three.brokers[leader].start(timeout=60)
        three.wait_isr(topic, 1, 3, timeout=60)
    got = consume_all(three.bootstrap, topic, 1, len(sent))[0]
    assert [v for _, v in got] == sent  # nothing lost, no duplicates, in order
    controller = next(b for b in (1, 2, 3) if three.metric(b, "ferry_controller_active") == 1)
    assert three.metric(controller, "ferry_controller_leader_elections_total") >= 1
    assert {o for _, o, _ in acked_all} == {o for o, _ in got}


def test_controlled_shutdown_moves_leadership_first(three):
    topic = "graceful"
    three.registry.create_topic_with_assignment(topic, {0: [1, 2, 3]})
    three.wait_isr(topic, 1, 3)
    acked, errors = produce_all(three.bootstrap, topic, [b"before"], partition=0)  # broker 1 leads by now
    assert acked and not errors
    epoch = three.state(topic, 0).leader_epoch
    three.brokers[1].stop()  # SIGTERM
    st = three.state(topic, 0)
    assert st.leader in (2, 3) and st.leader_epoch > epoch and 1 not in st.isr
    text = (three.brokers[1].data_dir.parent / "broker-1.out").read_text()
    assert "controlled shutdown: no leadership left to move" in text


def test_unclean_election_off_keeps_a_partition_offline_until_an_isr_member_returns(three):
    topic = "offline"
    three.registry.create_topic_with_assignment(topic, {0: [1, 2]})
    three.wait_isr(topic, 1, 2)
    three.kill(2)
    three.wait_state(topic, 0, lambda s: s.isr == (1,), 30, "ISR without 2")
    three.kill(1)
    st = three.wait_state(topic, 0, lambda s: s.leader == -1, 30, "offline")
    assert st.isr == (1,)
    three.brokers[2].start(timeout=60)  # not in sync: must not lead
    time.sleep(2.0)
    assert three.state(topic, 0).leader == -1
    three.brokers[1].start(timeout=60)
    three.wait_state(topic, 0, lambda s: s.leader == 1, 30, "leader 1 back")


def test_reassignment_raises_the_replication_factor_and_moves_a_partition_after_copying(three):
    import json

    from ferry.zk.znodes import REASSIGN_PARTITIONS_PATH

    topic = "grow"
    three.registry.create_topic_with_assignment(topic, {0: [1], 1: [2]})
    three.wait_isr(topic, 2, 1)
    values = [f"g{i}".encode() for i in range(400)]
    for p in (0, 1):
        acked, errors = produce_all(three.bootstrap, topic, values, partition=p)
        assert len(acked) == len(values) and not errors
    request = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2, 3]},
                                            {"topic": topic, "partition": 1, "replicas": [3]}]}
    three.registry.client.create(REASSIGN_PARTITIONS_PATH, json.dumps(request).encode(), makepath=True)
    deadline = time.monotonic() + 60
    while three.registry.client.exists(REASSIGN_PARTITIONS_PATH) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not three.registry.client.exists(REASSIGN_PARTITIONS_PATH), "reassignment did not finish"
    info = three.registry.topic(topic)
    assert info.replicas == {0: (1, 2, 3), 1: (3,)}
    three.wait_state(topic, 0, lambda s: sorted(s.isr) == [1, 2, 3], 30, "ISR of the new replicas")
    three.wait_state(topic, 1, lambda s: s.leader == 3 and s.isr == (3,), 30, "moved to 3")
    got = consume_all(three.bootstrap, topic, 2, 2 * len(values))
    assert [v for _, v in got[0]] == values and [v for _, v in got[1]] == values
    time.sleep(0.5)
    logs = {b: batches_on_disk(three.log_dir(b, topic, 0)) for b in (1, 2, 3)}
    assert logs[1] and logs[1] == logs[2] == logs[3]
    deadline = time.monotonic() + 10
    while three.log_dir(2, topic, 1).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not three.log_dir(2, topic, 1).exists(), "the old replica's copy stays behind"


def test_delete_records_moves_the_followers_log_start_too(three):
    from confluent_kafka.admin import AdminClient

    topic = "trim"
    three.registry.create_topic_with_assignment(topic, {0: [1, 2, 3]})
    three.wait_isr(topic, 1, 3)
    acked, errors = produce_all(three.bootstrap, topic, [f"t{i}".encode() for i in range(100)], partition=0)
    assert len(acked) == 100 and not errors
    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 40)])
    for f in futures.values():
        assert f.result(timeout=30).low_watermark == 40
    # a new leader must not serve what DeleteRecords removed: every replica keeps the new start
    deadline = time.monotonic() + 15
    starts: dict[int, str] = {}
    while time.monotonic() < deadline:
        starts = {b: (three.log_dir(b, topic, 0) / "log-start-offset").read_text().strip()
                  if (three.log_dir(b, topic, 0) / "log-start-offset").exists() else "" for b in (1, 2, 3)}
        if all(v == "40" for v in starts.values()):
            break
        acked, _ = produce_all(three.bootstrap, topic, [b"more"], partition=0)  # answers carry the start
        time.sleep(0.2)
    assert starts == {1: "40", 2: "40", 3: "40"}
