"""`ferry topics ...` against a real ZooKeeper (brokers registered by a registry in this process)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ferry.cli import main
from ferry.zk import ClusterRegistry


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
    assert main(["topics", "create", "t", "--partitions", "1", "--zookeeper", zk_connect]) == 2
    assert "no live brokers" in capsys.readouterr().err
    # read-only commands do not create a mistyped chroot
    assert main(["topics", "list", "--zookeeper", zk_server.connect + "/no/such/chroot"]) == 2
    assert "has no /no/such/chroot" in capsys.readouterr().err
    assert main(["topics", "list", "--zookeeper", "127.0.0.1:99999/x"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["topics", "list", "--zookeeper", "127.0.0.1:1/x", "--timeout", "1"]) == 2
    assert "cannot connect to ZooKeeper" in capsys.readouterr().err


def test_help_documents_every_flag() -> None:
    for action, flags in {
        "create": ["--partitions", "--zookeeper", "--config", "--if-not-exists", "--timeout"],
        "list": ["--zookeeper", "--json"],
        "describe": ["--zookeeper", "--json"],
        "alter": ["--partitions", "--zookeeper"],
    }.items():
        rc, out, _ = ferry("topics", action, "--help")
        assert rc == 0
        for flag in flags:
            assert flag in out, (action, flag)
    rc, _, err = ferry("topics")
    assert rc == 2 and "ACTION" in err
