"""`ferry topics ...` against a real ZooKeeper (brokers registered by a registry in this process)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ferry.cli import main
from ferry.zk import ClusterRegistry
from ferry.zk.assignment import assign_replicas
from ferry.zk.znodes import NO_LEADER, PartitionState, partition_state_path


@pytest.fixture
def cluster(zk_connect: str) -> Iterator[tuple[str, ClusterRegistry, ClusterRegistry]]:
    b1 = ClusterRegistry(zk_connect, timeout=4).start()
    b2 = ClusterRegistry(zk_connect, timeout=4).start()
    b1.register_broker(1, "127.0.0.1", 19092, "live")
    b2.register_broker(2, "127.0.0.1", 19093, "live")
    yield zk_connect, b1, b2
    b1.stop()
    b2.stop()


def ferry(*argv: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "ferry.cli", *argv], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.slow
def test_round_trip_subprocess(cluster) -> None:
    zk, b1, _ = cluster
    rc, out, err = ferry("topics", "create", "page_view", "--partitions", "3", "--zookeeper", zk,
                         "--config", "retention.ms=3600000")
    assert rc == 0, err
    assert "Created topic page_view with 3 partitions" in out
    assert b1.topic("page_view").config == {"retention.ms": "3600000"}

    rc, out, err = ferry("topics", "list", "--zookeeper", zk)
    assert (rc, out) == (0, "page_view\n"), err

    rc, out, err = ferry("topics", "describe", "page_view", "--zookeeper", zk, "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [p["partition"] for p in doc["partitions"]] == [0, 1, 2]
    assert all(p["alive"] and p["broker"] in ("127.0.0.1:19092", "127.0.0.1:19093") for p in doc["partitions"])


def test_create_errors(cluster, capsys) -> None:
    zk, _, _ = cluster
    assert main(["topics", "create", "t", "--partitions", "2", "--zookeeper", zk]) == 0
    capsys.readouterr()
    assert main(["topics", "create", "t", "--partitions", "2", "--zookeeper", zk]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["topics", "create", "t", "--partitions", "2", "--zookeeper", zk, "--if-not-exists"]) == 0
    assert "already exists" in capsys.readouterr().out
    for argv, fragment in [
        (["bad name", "--partitions", "1"], "only ASCII letters"),
        ([".", "--partitions", "1"], "cannot be"),
        (["x" * 250, "--partitions", "1"], "limit is 249"),
        (["ok", "--partitions", "0"], "at least 1"),
        (["ok", "--partitions", "1", "--config", "retention.ms"], "KEY=VALUE"),
        (["ok", "--partitions", "1", "--config", "retention.ms=soon"], "retention.ms: expected an integer"),
        (["ok", "--partitions", "1", "--config", "compression.type=brotli"], "compression.type: expected one of"),
    ]:
        assert main(["topics", "create", *argv, "--zookeeper", zk]) == 2
        err = capsys.readouterr().err
        assert fragment in err and "Traceback" not in err
    assert main(["topics", "list", "--zookeeper", zk]) == 0
    assert capsys.readouterr().out == "t\n"  # nothing half-created by the refused commands


def test_describe_shows_dead_leader_and_alter(cluster, capsys) -> None:
    zk, b1, b2 = cluster
    assert main(["topics", "create", "clicks", "--partitions", "4", "--zookeeper", zk]) == 0
    b2.stop()
    capsys.readouterr()
    assert main(["topics", "describe", "--zookeeper", zk]) == 0
    out = capsys.readouterr().out
    assert "Topic: clicks\tPartitionCount: 4" in out
    assert out.count("Alive: yes") == 2 and out.count("Alive: NO") == 2
    assert "Broker: 127.0.0.1:19092" in out

    assert main(["topics", "alter", "clicks", "--partitions", "6", "--zookeeper", zk]) == 0
    assert "4 -> 6 partitions" in capsys.readouterr().out
    # only broker 1 is alive now: the new partitions go there
    assert [b1.topic("clicks").partitions[p] for p in (4, 5)] == [1, 1]
    assert main(["topics", "alter", "clicks", "--partitions", "3", "--zookeeper", zk]) == 2
    assert "must be larger" in capsys.readouterr().err
    assert main(["topics", "alter", "nope", "--partitions", "3", "--zookeeper", zk]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["topics", "describe", "nope", "--zookeeper", zk]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_no_brokers_and_bad_zookeeper(zk_connect: str, zk_server, capsys) -> None:
    # the cluster's state, not the flags: a runtime error (exit 1); bad values below are usage errors (exit 2)
    assert main(["topics", "create", "t", "--partitions", "1", "--zookeeper", zk_connect]) == 1
    assert "no live brokers" in capsys.readouterr().err
    # read-only commands do not create a mistyped chroot
    assert main(["topics", "list", "--zookeeper", zk_server.connect + "/no/such/chroot"]) == 2
    assert "has no /no/such/chroot" in capsys.readouterr().err
    assert main(["topics", "list", "--zookeeper", "127.0.0.1:99999/x"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["topics", "list", "--zookeeper", "127.0.0.1:1/x", "--timeout", "1"]) == 1  # unreachable: runtime
    assert "cannot connect to ZooKeeper" in capsys.readouterr().err


@pytest.mark.slow
def test_help_documents_every_flag() -> None:
    for action, flags in {
        "create": ["--partitions", "--replication-factor", "--replica-assignment", "--zookeeper", "--config",
                   "--if-not-exists", "--timeout"],
        "list": ["--zookeeper", "--json"],
        "describe": ["--zookeeper", "--json", "--under-replicated", "--under-replicated-partitions",
                     "--unavailable-partitions"],
        "alter": ["--partitions", "--zookeeper"],
    }.items():
        rc, out, _ = ferry("topics", action, "--help")
        assert rc == 0
        for flag in flags:
            assert flag in out, (action, flag)
    rc, _, err = ferry("topics")
    assert rc == 2 and "ACTION" in err


# ---------------------------------------------------------------------------- replication
def _line(topic: str, p: int, leader: int | str, replicas, isr, tail: str) -> str:
    return (f"\tTopic: {topic}\tPartition: {p}\tLeader: {leader}\tReplicas: {','.join(map(str, replicas))}"
            f"\tIsr: {','.join(map(str, isr))}\t{tail}")


def test_create_with_replication_factor_and_describe(cluster, capsys) -> None:
    zk, b1, b2 = cluster
    b3 = ClusterRegistry(zk, timeout=4).start()
    try:
        b3.register_broker(3, "127.0.0.1", 19094, "live")
        assert main(["topics", "create", "rep", "--partitions", "6", "--replication-factor", "3",
                     "--zookeeper", zk]) == 0
        assert capsys.readouterr().out == "Created topic rep with 6 partitions, replication factor 3.\n"
        expected = assign_replicas("rep", [1, 2, 3], 0, 6, 3)
        assert b1.topic("rep").replicas == expected
        ports = {1: 19092, 2: 19093, 3: 19094}

        assert main(["topics", "describe", "rep", "--zookeeper", zk]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == "Topic: rep\tPartitionCount: 6\tReplicationFactor: 3\tConfig: -"
        assert lines[1:7] == [_line("rep", p, r[0], r, r, f"Broker: 127.0.0.1:{ports[r[0]]}\tAlive: yes")
                              for p, r in expected.items()]
        # then the live brokers (registered here without ferry's version fields: "unknown")
        assert lines[7:] == [f"BrokerId: {b}\tAddress: 127.0.0.1:{ports[b]}\tDatacenter: live\tVersion: unknown"
                             "\tNative: unknown" for b in (1, 2, 3)]

        # broker 3 falls out of partition 1's ISR; partition 2 loses its leader
        r1, r2 = expected[1], expected[2]
        shrunk = PartitionState(r1[0], 1, tuple(b for b in r1 if b != 3), 0)
        b1.client.set(partition_state_path("rep", 1), shrunk.encode())
        b1.client.set(partition_state_path("rep", 2), PartitionState(NO_LEADER, 2, (), 0).encode())
        assert main(["topics", "describe", "rep", "--under-replicated", "--zookeeper", zk]) == 0
        assert capsys.readouterr().out.splitlines() == [
            _line("rep", 1, r1[0], r1, shrunk.isr, f"Broker: 127.0.0.1:{ports[r1[0]]}\tAlive: yes"),
            _line("rep", 2, "none", r2, (), "Broker: none\tAlive: NO (no leader)"),
        ]
        assert main(["topics", "describe", "--unavailable-partitions", "--zookeeper", zk]) == 0
        assert capsys.readouterr().out.splitlines() == [_line("rep", 2, "none", r2, (), "Broker: none\tAlive: NO (no leader)")]
        assert main(["topics", "describe", "rep", "--json", "--zookeeper", zk]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["replication_factor"] == 3
        assert doc["partitions"][1]["isr"] == list(shrunk.isr) and doc["partitions"][1]["under_replicated"]
        assert doc["partitions"][2]["leader"] is None and not doc["partitions"][2]["alive"]
        assert doc["partitions"][0]["replicas"] == list(expected[0]) and doc["partitions"][0]["leader_epoch"] == 0

        # growing keeps the replication factor
        assert main(["topics", "alter", "rep", "--partitions", "8", "--zookeeper", zk]) == 0
        capsys.readouterr()
        assert [len(b1.topic("rep").replicas[p]) for p in (6, 7)] == [3, 3]

        b3.stop()  # a replica's broker is gone: its ISR (written by a controller) is not this tool's business
        assert main(["topics", "describe", "--under-replicated", "--zookeeper", zk]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 2  # still partitions 1 and 2 only
    finally:
        b3.stop()


def test_replication_factor_larger_than_the_cluster_is_refused(cluster, capsys) -> None:
    zk, b1, _ = cluster
    assert main(["topics", "create", "big", "--partitions", "2", "--replication-factor", "3", "--zookeeper", zk]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ferry topics create: error: replication factor 3 is larger than the 2 registered brokers")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert main(["topics", "create", "big", "--partitions", "2", "--replication-factor", "0", "--zookeeper", zk]) == 2
    assert "at least 1" in capsys.readouterr().err
    assert b1.topics() == {}
    # without the flag: replication factor 1
    assert main(["topics", "create", "small", "--partitions", "2", "--zookeeper", zk]) == 0
    assert "replication factor 1" in capsys.readouterr().out
    assert [len(r) for r in b1.topic("small").replicas.values()] == [1, 1]
    assert main(["topics", "describe", "small", "--under-replicated", "--zookeeper", zk]) == 0
    assert capsys.readouterr().out == ""  # nothing under-replicated: exit 0, no lines


def test_replica_assignment(cluster, capsys) -> None:
    zk, b1, _ = cluster
    assert main(["topics", "create", "man", "--replica-assignment", "2:1,1:2,2:1", "--zookeeper", zk]) == 0
    assert "3 partitions, replication factor 2" in capsys.readouterr().out
    assert b1.topic("man").replicas == {0: (2, 1), 1: (1, 2), 2: (2, 1)}
    for argv, fragment in [
        (["x", "--replica-assignment", "1:2", "--partitions", "1"], "cannot be combined"),
        (["x", "--replica-assignment", "1:2", "--replication-factor", "2"], "cannot be combined"),
        (["x", "--replica-assignment", "1:a"], "must be broker ids"),
        (["x", "--replica-assignment", "1:5"], "not registered"),
        (["x", "--replica-assignment", "1:1"], "names a broker twice"),
        (["x", "--replica-assignment", "1:2,1"], "same number of replicas"),
        (["x"], "--partitions N is required"),
    ]:
        assert main(["topics", "create", *argv, "--zookeeper", zk]) == 2, argv
        err = capsys.readouterr().err
        assert fragment in err and err.count("\n") == 1, (argv, err)
    assert sorted(b1.topics()) == ["man"]


def test_legacy_topic_without_partition_states(cluster, capsys) -> None:
    zk, b1, _ = cluster
    b1.client.create("/brokers/topics/old", json.dumps({"version": 1, "partitions": {"0": [1]}}).encode())
    assert main(["topics", "describe", "old", "--zookeeper", zk]) == 0
    assert capsys.readouterr().out.splitlines()[1] == _line("old", 0, "none", [1], [], "Broker: none\tAlive: NO (no leader)")


@pytest.mark.slow
def test_configs_and_delete_over_zookeeper(cluster) -> None:
    """`ferry configs --zookeeper` reads and writes a topic's config in its znode; `ferry topics delete
    --zookeeper` removes the topic and the groups' offsets of it (as DeleteTopics does)."""
    from ferry.zk.group_offsets import CommittedOffset, commit_offsets, fetch_offsets

    zk, b1, _ = cluster
    assert ferry("topics", "create", "cz", "--partitions", "1", "--zookeeper", zk)[0] == 0
    rc, out, err = ferry("configs", "--zookeeper", zk, "--topic", "cz", "--alter", "--add-config",
                         "retention.ms=5000,segment.bytes=1048576")
    assert (rc, out) == (0, "Completed updating config for topic cz.\n"), err
    assert b1.topic("cz").config == {"retention.ms": "5000", "segment.bytes": "1048576"}
    assert ferry("configs", "--zookeeper", zk, "--topic", "cz", "--alter", "--delete-config", "segment.bytes")[0] == 0
    rc, out, err = ferry("configs", "--zookeeper", zk, "--entity-type", "topics", "--entity-name", "cz", "--describe")
    assert out.splitlines() == ["Dynamic configs for topic cz are:",
                                "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000}"]
    for argv in (("--topic", "cz", "--alter", "--add-config", "retention.ms=x"), ("--broker", "1", "--describe"),
                 ("--topic", "nope", "--describe")):
        rc, out, err = ferry("configs", "--zookeeper", zk, *argv)
        assert rc == 2 and len(err.splitlines()) == 1, (argv, err)

    commit_offsets(b1.client, "g", {("cz", 0): CommittedOffset(3)})
    rc, out, err = ferry("topics", "delete", "cz", "--zookeeper", zk)
    assert (rc, out) == (0, ""), err
    assert b1.topic("cz") is None and fetch_offsets(b1.client, "g") == {}
    rc, out, err = ferry("topics", "delete", "cz", "--zookeeper", zk)
    assert rc == 2 and "does not exist" in err
