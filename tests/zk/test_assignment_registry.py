"""Replicated topics in the registry against a real ZooKeeper: placement, initial partition states, growth,
deletion, and that the topic readers and watches are not disturbed by the partition-state children."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from ferry.zk import (
    ClusterRegistry,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    NoBrokersError,
    TopicExistsError,
    UnknownTopicError,
)
from ferry.zk.assignment import assign_replicas
from ferry.zk.znodes import CONTROLLER_EPOCH_PATH, PartitionState, partition_state_path

SESSION = 4.0


@pytest.fixture
def registries(zk_connect: str) -> Iterator[Callable[[], ClusterRegistry]]:
    started: list[ClusterRegistry] = []

    def make() -> ClusterRegistry:
        r = ClusterRegistry(zk_connect, timeout=SESSION).start()
        started.append(r)
        return r

    yield make
    for r in started:
        r.stop()


@pytest.fixture
def three(registries) -> tuple[ClusterRegistry, list[ClusterRegistry]]:
    """An admin registry and three registered brokers (ids 1, 2, 3)."""
    brokers = []
    for i in (1, 2, 3):
        r = registries()
        r.register_broker(i, "127.0.0.1", 9090 + i)
        brokers.append(r)
    return registries(), brokers


def state_of(r: ClusterRegistry, topic: str, p: int) -> dict:
    return json.loads(r.client.get(partition_state_path(topic, p))[0])


def test_create_writes_assignment_and_initial_states(three) -> None:
    admin, _ = three
    info = admin.create_topic("page_view", 6, {"retention.ms": "1000"}, replication_factor=3)
    expected = assign_replicas("page_view", [1, 2, 3], 0, 6, 3)
    assert info.replicas == expected and info.partitions == {p: r[0] for p, r in expected.items()}
    raw = json.loads(admin.client.get("/brokers/topics/page_view")[0])
    assert raw.pop("topic_id") == info.topic_id and len(info.topic_id) == 22  # KIP-516's id, as Kafka writes it
    assert raw == {"version": 1, "partitions": {str(p): list(r) for p, r in expected.items()},
                   "config": {"retention.ms": "1000"}}
    for p, replicas in expected.items():
        assert state_of(admin, "page_view", p) == {"version": 1, "controller_epoch": 0, "leader": replicas[0],
                                                  "leader_epoch": 0, "isr": list(replicas)}
    assert sorted(admin.client.get_children("/brokers/topics/page_view/partitions")) == [str(p) for p in range(6)]
    states = admin.partition_states("page_view")
    assert states == {p: PartitionState(r[0], 0, r, 0) for p, r in expected.items()}
    # every broker leads two partitions and holds six replicas
    assert sorted(r[0] for r in expected.values()) == [1, 1, 2, 2, 3, 3]
    # the readers are unchanged by the children
    assert admin.topic("page_view") == info and admin.topics() == {"page_view": info}


def test_initial_state_carries_the_controller_epoch(three) -> None:
    admin, _ = three
    admin.client.create(CONTROLLER_EPOCH_PATH, b"7")
    admin.create_topic("t", 2, replication_factor=2)
    assert {state_of(admin, "t", p)["controller_epoch"] for p in (0, 1)} == {7}


def test_replication_factor_refused_and_nothing_written(three) -> None:
    admin, brokers = three
    with pytest.raises(InvalidReplicationFactorError, match="replication factor 4 is larger than the 3 registered"):
        admin.create_topic("t", 3, replication_factor=4)
    with pytest.raises(InvalidReplicationFactorError, match="at least 1"):
        admin.create_topic("t", 3, replication_factor=0)
    assert admin.topics() == {} and admin.client.exists("/brokers/topics/t") is None
    # grow with fewer live brokers than the topic's replication factor: refused, nothing changes
    info = admin.create_topic("t", 2, replication_factor=3)
    brokers[2].stop()
    with pytest.raises(InvalidReplicationFactorError, match="replication factor 3 is larger than the 2"):
        admin.add_partitions("t", 4)
    assert admin.topic("t") == info
    assert sorted(admin.client.get_children("/brokers/topics/t/partitions")) == ["0", "1"]


def test_no_brokers_still_says_so(registries) -> None:
    with pytest.raises(NoBrokersError, match="no live brokers"):
        registries().create_topic("t", 1, replication_factor=2)


def test_add_partitions_keeps_replication_factor_and_existing_states(three) -> None:
    admin, _ = three
    admin.create_topic("clicks", 3, replication_factor=2)
    # the controller/leader moved on for partition 0 meanwhile: growing must not touch it
    moved = PartitionState(leader=2, leader_epoch=4, isr=(2,), controller_epoch=1)
    admin.client.set(partition_state_path("clicks", 0), moved.encode())
    grown = admin.add_partitions("clicks", 7)
    assert grown.replicas == assign_replicas("clicks", [1, 2, 3], 0, 7, 2)  # as if created with 7 at once
    states = admin.partition_states("clicks")
    assert states[0] == moved
    for p in range(1, 7):
        r = grown.replicas[p]
        assert len(r) == 2 and states[p] == PartitionState(r[0], 0, r, 0)


def test_legacy_topic_without_states(three) -> None:
    """A topic written before partition states existed: readable, states missing, growable."""
    admin, _ = three
    admin.client.create("/brokers/topics/old", json.dumps(
        {"version": 1, "partitions": {"0": [1], "1": [2]}, "config": {}}).encode())
    missing = PartitionState(leader=-1, leader_epoch=-1, isr=())
    assert admin.partition_states("old") == {0: missing, 1: missing}
    grown = admin.add_partitions("old", 3)
    assert len(grown.replicas[2]) == 1
    states = admin.partition_states("old")
    assert states[0] == missing and states[2].leader == grown.replicas[2][0] and states[2].isr == grown.replicas[2]
    admin.client.set(partition_state_path("old", 2), b"garbage")
    assert admin.partition_states("old")[2] == missing  # unreadable = missing, not an exception
    with pytest.raises(UnknownTopicError, match="does not exist"):
        admin.partition_states("nope")


def test_delete_removes_the_subtree_and_recreate(three) -> None:
    admin, _ = three
    admin.create_topic("gone", 4, replication_factor=3)
    admin.delete_topic("gone")
    assert admin.client.exists("/brokers/topics/gone") is None and admin.topics() == {}
    with pytest.raises(UnknownTopicError):
        admin.delete_topic("gone")
    again = admin.create_topic("gone", 2, replication_factor=1)  # no leftovers in the way
    assert [len(r) for r in again.replicas.values()] == [1, 1]
    assert sorted(admin.partition_states("gone")) == [0, 1]


def test_watchers_see_replicated_topics(three) -> None:
    """The notifier reads topic znodes' data only: partition state writes do not fire topic callbacks."""
    admin, brokers = three
    maps: list[dict] = []
    seen = threading.Event()

    def on_topics(m: dict) -> None:
        maps.append(m)
        seen.set()

    brokers[0].watch_topics(on_topics)
    deadline = time.monotonic() + 10
    admin.create_topic("w", 3, replication_factor=3)
    while time.monotonic() < deadline and not (maps and "w" in maps[-1]):
        time.sleep(0.05)
    assert maps[-1]["w"].replicas == admin.topic("w").replicas
    n = len(maps)
    admin.client.set(partition_state_path("w", 1), PartitionState(2, 1, (2, 3), 0).encode())
    time.sleep(0.5)
    assert len(maps) == n
    admin.delete_topic("w")
    while time.monotonic() < deadline and "w" in maps[-1]:
        time.sleep(0.05)
    assert "w" not in maps[-1]


def test_create_with_a_manual_assignment(three) -> None:
    admin, _ = three
    info = admin.create_topic_with_assignment("manual", {0: [3, 1], 1: [2, 3]}, {"min.insync.replicas": "2"})
    assert info.replicas == {0: (3, 1), 1: (2, 3)} and info.partitions == {0: 3, 1: 2}
    assert admin.partition_states("manual") == {0: PartitionState(3, 0, (3, 1), 0), 1: PartitionState(2, 0, (2, 3), 0)}
    with pytest.raises(InvalidReplicaAssignmentError, match="not registered"):
        admin.create_topic_with_assignment("other", {0: [1, 5]})
    with pytest.raises(TopicExistsError):
        admin.create_topic_with_assignment("manual", {0: [1]})
    assert sorted(admin.topics()) == ["manual"]
