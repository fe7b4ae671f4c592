"""`ferry produce`, `ferry consume`, `ferry groups` as a user runs them (subprocesses, real cluster)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ferry.client.consumer_connector import ConsumerConnector
from ferry.client.group_store import read_offsets
from ferry.client.producer import Producer
from tests.client.conftest import create_topic
from tests.client.group_helpers import wait_until, zk_client

ROOT = Path(__file__).resolve().parents[2]


def ferry(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FERRY_ZOOKEEPER", None)
    return subprocess.run([sys.executable, "-m", "ferry.cli", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_produce_consume_and_manage_a_group(live):
    zk = live.zk_connect
    create_topic(zk, "lines", 2)
    lines = [f"k{i % 3}:value {i}" for i in range(20)]
    r = ferry("produce", "--topic", "lines", "--zookeeper", zk, "--key-separator", ":", stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    assert "20 of 20" in r.stderr

    # direct read of all partitions, with offsets and keys
    r = ferry("consume", "--topic", "lines", "--zookeeper", zk, "--from-beginning", "--timeout-s", "3",
              "--print-offsets", "--print-keys")
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    assert sorted(f"{k}:{v}" for _, _, k, v in rows) == sorted(lines)
    key_partitions: dict[str, set[str]] = {}
    for p, _, k, _ in rows:
        key_partitions.setdefault(k, set()).add(p)
    assert all(len(ps) == 1 for ps in key_partitions.values())  # keyed: one partition per key

    # as a group member: reads 5, commits exactly those 5, then the next run continues after them
    r = ferry("consume", "--topic", "lines", "--zookeeper", zk, "--group", "cli", "--from-beginning",
              "--max-messages", "5", "--timeout-s", "5")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()
    assert len(first) == 5
    zkc = zk_client(zk)
    try:
        assert sum(read_offsets(zkc, "cli").values()) == 5
        r = ferry("consume", "--topic", "lines", "--zookeeper", zk, "--group", "cli", "--timeout-s", "3")
        assert r.returncode == 0, r.stderr
        assert sorted(first + r.stdout.splitlines()) == sorted(line.split(":", 1)[1] for line in lines)

        r = ferry("groups", "list", "--zookeeper", zk)
        assert r.returncode == 0 and r.stdout.split() == ["cli"], r.stderr
        r = ferry("groups", "describe", "--group", "cli", "--zookeeper", zk, "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["members"] == []
        assert [(x["committed"], x["log_end"], x["lag"]) for x in doc["partitions"]] == [
            (x["log_end"], x["log_end"], 0) for x in doc["partitions"]]
        assert sum(x["log_end"] for x in doc["partitions"]) == 20
        r = ferry("groups", "describe", "--group", "cli", "--zookeeper", zk)
        assert "LAG" in r.stdout and "lines" in r.stdout

        # reset to the earliest: the whole topic is lag again
        before = read_offsets(zkc, "cli")
        r = ferry("groups", "reset", "--group", "cli", "--zookeeper", zk, "--to-earliest")
        assert r.returncode == 0 and "--execute" in r.stderr, r.stderr
        assert read_offsets(zkc, "cli") == before  # a dry run unless --execute (as kafka-consumer-groups)
        r = ferry("groups", "reset", "--group", "cli", "--zookeeper", zk, "--to-earliest", "--execute")
        assert r.returncode == 0, r.stderr
        assert set(read_offsets(zkc, "cli").values()) == {0}
        r = ferry("groups", "reset", "--group", "cli", "--zookeeper", zk, "--topic", "lines", "--partitions", "0",
                  "--to-offset", "999999", "--dry-run")
        assert r.returncode == 0 and "clamped" in r.stdout, r.stdout + r.stderr
        assert set(read_offsets(zkc, "cli").values()) == {0}  # dry run wrote nothing

        # reset by time: ListOffsets by timestamp
        create_topic(zk, "timed", 1)
        base = 1_700_000_000_000
        with Producer(zookeeper=zk, audit=False, linger_ms=0) as p:
            for i in range(10):  # one batch per message, so the time index tells them apart
                p.send("timed", f"t{i}".encode(), timestamp_ms=base + i * 1000)
                assert p.flush(10) == 0
        when = dt.datetime.fromtimestamp((base + 5000) / 1000, dt.UTC).isoformat()
        r = ferry("groups", "reset", "--group", "cli", "--zookeeper", zk, "--topic", "timed", "--to-datetime", when,
                  "--execute")
        assert r.returncode == 0, r.stderr
        assert read_offsets(zkc, "cli")[("timed", 0)] == 5

        # refused while the group has a live member, unless --force
        member = ConsumerConnector("cli", zk, consumer_id="live-one")
        try:
            member.create_message_streams({"lines": 1})
            wait_until(lambda: member.owned_partitions(), what="member owns partitions")
            r = ferry("groups", "reset", "--group", "cli", "--zookeeper", zk, "--to-latest", "--execute")
            assert r.returncode == 2 and "live member" in r.stderr and "live-one" in r.stderr
            r = ferry("groups", "describe", "--group", "cli", "--zookeeper", zk, "--json")
            owners = {x["owner"] for x in json.loads(r.stdout)["partitions"] if x["topic"] == "lines"}
            assert owners == {"live-one"}
            r = ferry("groups", "reset", "--group", "cli", "--zookeeper", zk, "--topic", "lines", "--to-latest",
                      "--force", "--execute")
            assert r.returncode == 0, r.stderr
        finally:
            member.shutdown()
    finally:
        zkc.stop()
        zkc.close()


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_bad_input_gets_a_clear_error_and_exit_2(live):
    zk = live.zk_connect
    create_topic(zk, "strict", 1)
    r = ferry("produce", "--topic", "strict", "--zookeeper", zk, "--key-separator", ":", stdin="a:1\nb:2\nno-sep\nc:3\n")
    assert r.returncode == 2 and "line 3 has no key separator" in r.stderr
    r2 = ferry("consume", "--topic", "strict", "--zookeeper", zk, "--from-beginning", "--timeout-s", "3")
    assert r2.stdout.splitlines() == ["1", "2"]  # the lines before the bad one were sent, nothing after
    r = ferry("produce", "--topic", "missing", "--zookeeper", zk, stdin="x\n")
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = ferry("consume", "--topic", "missing", "--zookeeper", zk, "--group", "g", "--timeout-s", "1")
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = ferry("consume", "--topic", "strict")
    assert r.returncode == 2 and "--zookeeper" in r.stderr
    r = ferry("groups", "describe", "--group", "nope", "--zookeeper", zk)
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = ferry("groups", "reset", "--group", "nope", "--zookeeper", zk, "--to-earliest")
    assert r.returncode == 2 and "--topic" in r.stderr
    r = ferry("groups", "reset", "--group", "nope", "--zookeeper", zk, "--topic", "strict", "--to-datetime", "soon")
    assert r.returncode == 2 and "ISO" in r.stderr


@pytest.mark.slow
def test_every_flag_is_documented_in_help():
    for cmd, flags in [
        (["produce"], ["--topic", "--bootstrap-server", "--bootstrap", "--zookeeper", "--key-separator", "--acks", "--compression",
                       "--linger-ms", "--partitioner", "--no-audit"]),
        (["consume"], ["--topic", "--zookeeper", "--group", "--from-beginning", "--max-messages", "--timeout",
                       "--print-offsets", "--value-format"]),
        (["groups", "describe"], ["--group", "--zookeeper", "--json"]),
        (["groups", "reset"], ["--to-earliest", "--to-latest", "--to-offset", "--to-datetime", "--force",
                               "--dry-run", "--execute", "--partitions"]),
        (["audit", "report"], ["--zookeeper", "--topic", "--hours", "--json", "--timeout"]),
        (["mirror", "status"], ["--source-zookeeper", "--target-zookeeper", "--group", "--json"]),
        (["load"], ["--zookeeper", "--topics", "--step", "--state-dir", "--json"]),
    ]:
        r = ferry(*cmd, "--help")
        assert r.returncode == 0, r.stderr
        for flag in flags:
            assert flag in r.stdout, (cmd, flag)
    # one spelling each for JSON output and time limits; the older ones still parse but are not shown
    assert "--timeout-s" not in ferry("consume", "--help").stdout
    assert "--format" not in ferry("audit", "report", "--help").stdout
    status = ferry("mirror", "status", "--help").stdout
    assert "usage: ferry mirror status" in status and "--coalesce-bytes" not in status
    load = ferry("load", "--help").stdout
    assert "$FERRY_ZOOKEEPER" in load and "--topics T[,T...]" in load


@pytest.mark.slow  # eight commands, each waits out its ZooKeeper connect timeout (together: they only wait)
def test_an_unreachable_zookeeper_is_one_line_and_exit_1_in_every_command(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    bad = "127.0.0.1:1/nowhere"
    commands = (["topics", "list", "--zookeeper", bad], ["groups", "list", "--zookeeper", bad],
                ["schemas", "list", "--zookeeper", bad], ["audit", "report", "--zookeeper", bad, "--offline-only"],
                ["consume", "--topic", "t", "--zookeeper", bad], ["produce", "--topic", "t", "--zookeeper", bad],
                ["mirror", "status", "--source-zookeeper", bad, "--target-zookeeper", bad],
                ["load", "--zookeeper", bad, "--topics", "t", "--step", "plan", "--state-dir", str(tmp_path)])
    with ThreadPoolExecutor(len(commands)) as pool:
        results = list(pool.map(lambda argv: ferry(*argv, timeout=120), commands))
    for argv, r in zip(commands, results, strict=True):
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 1, (argv, r.stderr)  # a runtime failure (docs/cli.md)
        assert len(lines) == 1 and "cannot connect to ZooKeeper at 127.0.0.1:1" in lines[0], (argv, r.stderr)


def test_consume_from_unreachable_brokers_is_one_line_naming_them_and_exit_1():
    """No broker answers at --bootstrap-server: a failure at run time (exit 1, as a lost cluster is), told in one
    line that names the servers, without librdkafka's connect chatter or a traceback."""
    r = ferry("consume", "--topic", "t", "--bootstrap-server", "127.0.0.1:1")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1, r.stderr
    assert len(lines) == 1 and lines[0].startswith("ferry consume: error: cannot reach the brokers at 127.0.0.1:1"), \
        r.stderr
    assert r.stdout == ""


@pytest.mark.slow
def test_consume_reads_committed_transactions_unless_asked_otherwise(live):
    """`ferry consume` (direct and in a group) leaves an aborted transaction's records out by default, as
    the rest of the pipeline does; --isolation-level read_uncommitted shows them (kafka-console-consumer's)."""
    from confluent_kafka import Producer as KafkaProducer

    zk = live.zk_connect
    create_topic(zk, "txn-lines", 1)
    p = KafkaProducer({"bootstrap.servers": live.bootstrap, "transactional.id": "cli-txn"})
    p.init_transactions(30)
    for tag, n, commit in (("committed", 3, True), ("aborted", 2, False)):
        p.begin_transaction()
        for i in range(n):
            p.produce("txn-lines", f"{tag} {i}".encode(), partition=0)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    committed = [f"committed {i}" for i in range(3)]

    r = ferry("consume", "--topic", "txn-lines", "--zookeeper", zk, "--from-beginning", "--timeout-s", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == committed
    r = ferry("consume", "--topic", "txn-lines", "--zookeeper", zk, "--from-beginning", "--timeout-s", "3",
              "--isolation-level", "read_uncommitted")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == committed + ["aborted 0", "aborted 1"]
    r = ferry("consume", "--topic", "txn-lines", "--zookeeper", zk, "--group", "txn-cli", "--from-beginning",
              "--timeout-s", "5")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == committed
