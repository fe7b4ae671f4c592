"""--auto-create-topics: a Metadata request naming an unknown topic creates it (off by default); the replication
factor of created topics (default.replication.factor, CreateTopics, `_audit`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import (  # noqa: E402
    CREATE_TOPICS,
    METADATA,
    WireClient,
    build_batch,
    create_topic,
    metadata,
    produce,
)

from ferry.wire.protocol.primitives import Writer  # noqa: E402
from ferry.zk import ClusterRegistry  # noqa: E402


def _metadata_no_auto(c: WireClient, topic: str) -> int:
    body = Writer().array_len(1).string(topic).boolean(False).boolean(False).boolean(False).buf
    r = c.request(METADATA, 8, bytes(body))
    r.int32()
    for _ in range(r.int32()):
        r.int32(), r.string(), r.int32(), r.nullable_string()
    r.nullable_string(), r.int32()
    assert r.int32() == 1
    return r.int16()


def test_auto_create_on_metadata(cluster_factory):
    cluster = cluster_factory(1, extra_args=("--auto-create-topics", "--num-partitions", "2"))
    (broker,) = cluster.brokers.values()
    with WireClient(broker.bootstrap) as c:
        assert _metadata_no_auto(c, "not-asked") == 3  # allow_auto_topic_creation=false is honoured
        deadline = time.monotonic() + 10
        while True:
            err, parts = metadata(c, ["auto-topic"], version=3)["topics"]["auto-topic"]  # v3: always allowed
            if err == 0 and len(parts) == 2:
                break
            assert err in (0, 5), err  # LEADER_NOT_AVAILABLE while it is being created
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert produce(c, "auto-topic", 1, build_batch([b"hello"])).error == 0
        assert metadata(c, ["not-asked"])["topics"]["not-asked"][0] == 3  # v8 request sent allow=False


def test_auto_create_is_off_by_default(cluster_factory):
    cluster = cluster_factory(1)
    (broker,) = cluster.brokers.values()
    with WireClient(broker.bootstrap) as c:
        assert metadata(c, ["nope"], version=3)["topics"]["nope"][0] == 3
        time.sleep(0.2)
        assert metadata(c, None)["topics"] == {}  # nothing created, not even `_audit` (audit.topic.partitions 0)


def test_the_audit_topic_is_created_at_start_up_when_asked(cluster_factory):
    cluster = cluster_factory(2, extra_args=("--audit-topic-partitions", "3"))
    with WireClient(next(iter(cluster.brokers.values())).bootstrap) as c:
        err, parts = metadata(c, ["_audit"])["topics"]["_audit"]
        assert err == 0 and sorted(parts) == [0, 1, 2]


# ---------------------------------------------------------------------------- replication factor
def _create_with_assignment(c: WireClient, name: str, assignment: list[tuple[int, list[int]]],
                            partitions: int = -1, rf: int = -1, validate_only: bool = False) -> tuple[int, str | None]:
    w = Writer().array_len(1).string(name).int32(partitions).int16(rf).array_len(len(assignment))
    for p, brokers in assignment:
        w.int32(p).array_len(len(brokers))
        for b in brokers:
            w.int32(b)
    w.array_len(0).int32(10_000).boolean(validate_only)
    r = c.request(CREATE_TOPICS, 4, bytes(w.buf))
    r.int32()
    assert r.int32() == 1 and r.string() == name
    return r.int16(), r.nullable_string()


def _replicas(zk: str, topic: str, timeout: float = 10.0) -> dict[int, tuple[int, ...]]:
    """The topic's replica lists, waiting for it (a broker creates `_audit` just after it registers)."""
    deadline = time.monotonic() + timeout
    with ClusterRegistry(zk, timeout=5, create=False) as registry:
        while (info := registry.topic(topic)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert info is not None, topic
        return info.replicas


def test_replication_factor_of_created_topics(cluster_factory, tmp_path):
    """default.replication.factor for auto-created topics and CreateTopics' -1; 38 beyond the live brokers;
    manual assignments checked as Kafka checks them."""
    props = tmp_path / "rf.properties"
    props.write_text("default.replication.factor=2\n")
    cluster = cluster_factory(3, extra_args=("--config", str(props), "--auto-create-topics",
                                             "--num-partitions", "3"))
    broker = cluster.brokers[1]
    with WireClient(broker.bootstrap) as c:
        metadata(c, ["auto-rf"], version=3)  # v3: auto-creation always allowed; returns once it is created
        assert [len(r) for r in _replicas(cluster.zk_connect, "auto-rf").values()] == [2, 2, 2]

        assert create_topic(c, "dflt", 4, replication_factor=-1)[0] == 0
        assert {len(r) for r in _replicas(cluster.zk_connect, "dflt").values()} == {2}
        assert create_topic(c, "three", 3, replication_factor=3)[0] == 0
        three = _replicas(cluster.zk_connect, "three")
        assert all(sorted(r) == [1, 2, 3] for r in three.values())
        assert sorted(r[0] for r in three.values()) == [1, 2, 3]  # leaders balanced
        err, message = create_topic(c, "four", 1, replication_factor=4)
        assert err == 38 and "replication factor 4 is larger than the 3 registered brokers" in message
        err, message = create_topic(c, "zero", 1, replication_factor=0)
        assert err == 38 and "at least 1" in message

        assert _create_with_assignment(c, "manual", [(0, [3, 1]), (1, [1, 2])]) == (0, None)
        assert _replicas(cluster.zk_connect, "manual") == {0: (3, 1), 1: (1, 2)}
        for assignment, fragment in [
            ([(0, [1, 9])], "not registered"),
            ([(0, [1, 1])], "names a broker twice"),
            ([(0, [1, 2]), (1, [3])], "same number of replicas"),
            ([(1, [1])], "must be 0..0"),
            ([(0, [1]), (0, [2])], "assigned twice"),
        ]:
            err, message = _create_with_assignment(c, "bad-manual", assignment)
            assert err == 39 and fragment in message, (assignment, message)
        assert _create_with_assignment(c, "both", [(0, [1])], partitions=1)[0] == 42  # INVALID_REQUEST
        assert _create_with_assignment(c, "dry", [(0, [1, 2])], validate_only=True) == (0, None)
        assert _create_with_assignment(c, "dry", [(0, [1, 7])], validate_only=True)[0] == 39
        assert create_topic(c, "four", 1, replication_factor=4)[0] == 38
        with ClusterRegistry(cluster.zk_connect, timeout=5, create=False) as registry:
            assert not {"four", "zero", "bad-manual", "both", "dry"} & set(registry.topics())


def test_the_audit_topic_replication_is_capped_at_the_live_brokers(cluster_factory, tmp_path):
    props = tmp_path / "rf.properties"
    props.write_text("default.replication.factor=3\n")
    cluster = cluster_factory(1, extra_args=("--config", str(props), "--audit-topic-partitions", "2"))
    assert _replicas(cluster.zk_connect, "_audit") == {0: (1,), 1: (1,)}
