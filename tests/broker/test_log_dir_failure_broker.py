"""A broker whose data dir fills up, with real broker processes on a real full filesystem (a 2 MiB tmpfs):
KAFKA_STORAGE_ERROR over the wire (never UNKNOWN_SERVER_ERROR), the process alive (no SIGBUS), one log
line, the offline-dir metric, leadership moved to an in-sync replica elsewhere so producers carry on, and
the directory back online (and the broker back in the ISR) once space is freed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from broker_wire import WireClient, build_batch, decode_values, fetch, metadata, produce
from disk_faults import failing_fdatasync_env, fill, small_tmpfs
from replication_helpers import FAST, ReplicatedCluster, batches_on_disk
from test_replication import consume_all, produce_all

pytestmark = pytest.mark.slow

STORAGE_ERROR = 56


def broker_log(cluster: ReplicatedCluster, broker_id: int) -> str:
    return cluster.brokers[broker_id].log_file.read_text(errors="replace")


def wait_for(pred, timeout: float, what: str, cluster: ReplicatedCluster | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    tail = "" if cluster is None else "\n" + broker_log(cluster, 1)[-4000:]
    raise AssertionError(f"{what} not reached in {timeout}s{tail}")


@pytest.fixture
def one_on_tmpfs(zk_server, tmp_path: Path):
    with small_tmpfs(tmp_path / "broker-1" / "data"):
        c = ReplicatedCluster(zk_server.connect, tmp_path, 1, FAST, metrics=True)
        try:
            yield c
        finally:
            c.stop()


@pytest.fixture
def three_one_on_tmpfs(zk_server, tmp_path: Path):
    with small_tmpfs(tmp_path / "broker-1" / "data"):
        c = ReplicatedCluster(zk_server.connect, tmp_path, 3, FAST, metrics=True)
        try:
            yield c
        finally:
            c.stop()


def test_a_full_disk_answers_kafka_storage_error_and_comes_back(one_on_tmpfs: ReplicatedCluster) -> None:
    c = one_on_tmpfs
    broker = c.brokers[1]
    c.registry.create_topic("full", 1)
    c.wait_state("full", 0, lambda s: s.leader == 1)
    ballast = broker.data_dir / "ballast"
    ballast.write_bytes(bytes(256 * 1024))
    acked: list[bytes] = []
    codes: list[int] = []
    with WireClient(broker.bootstrap) as client:
        wait_for(lambda: metadata(client, ["full"])["topics"]["full"] == (0, {0: (0, 1)}), 30,
                 "the broker knows it leads full-0")
        for i in range(2000):
            values = [f"{i}-{j}-".encode() + bytes(2000) for j in range(4)]
            res = produce(client, "full", 0, build_batch(values), acks=-1)
            codes.append(res.error)
            if res.error:
                break
            acked += values
        assert codes[-1] == STORAGE_ERROR, codes[-5:]  # never -1 (UNKNOWN_SERVER_ERROR)
        assert len(acked) > 100
        # offline: every produce and fetch of its partitions says so, Metadata still answers
        assert produce(client, "full", 0, build_batch([b"more"]), acks=1).error == STORAGE_ERROR
        assert fetch(client, "full", 0, 0).error == STORAGE_ERROR
        assert metadata(client, ["full"])["topics"]["full"] == (0, {0: (0, 1)})  # still the leader, still served
        assert broker.proc.poll() is None  # alive: no SIGBUS from the indexes' mmap
        assert c.metric(1, "ferry_broker_offline_log_dirs") == 1
        text = broker_log(c, 1)
        assert text.count("is offline") == 1 and "ENOSPC" in text and "Traceback" not in text, text[-4000:]

        ballast.unlink()  # space is back: the probe finds it, the logs are re-opened
        wait_for(lambda: produce(client, "full", 0, build_batch([b"after"]), acks=-1).error == 0, 30,
                 "produce accepted again", c)
        assert c.metric(1, "ferry_broker_offline_log_dirs") == 0
        got = []
        offset = 0
        while True:
            res = fetch(client, "full", 0, offset)
            assert res.error == 0
            records = decode_values(res.records)
            if not records:
                break
            got += [(o, v) for o, v in records if o >= offset]
            offset = got[-1][0] + 1
    values = [v for _, v in got]
    assert values[: len(acked)] == acked  # nothing acknowledged lost, in order
    assert values[len(acked):] == [b"after"]
    text = broker_log(c, 1)
    assert text.count("is offline") == 1 and text.count("back online") == 1 and "Traceback" not in text


def test_a_full_disk_moves_leadership_and_the_broker_rejoins(three_one_on_tmpfs: ReplicatedCluster) -> None:
    c = three_one_on_tmpfs
    topic = "rep"
    c.registry.create_topic_with_assignment(topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    c.wait_isr(topic, 1, 3)
    assert c.state(topic, 0).leader == 1
    first = [f"a{i}".encode() + bytes(300) for i in range(1000)]
    acked, errors = produce_all(c.bootstrap, topic, first, partition=0)
    assert not errors and len(acked) == len(first)

    filler = fill(c.brokers[1].data_dir)  # broker 1, the leader, has no block left
    second = [f"b{i}".encode() + bytes(300) for i in range(3000)]
    acked2, errors = produce_all(c.bootstrap, topic, second, partition=0)
    assert not errors and len(acked2) == len(second), (errors[:3], broker_log(c, 1)[-4000:])  # new leader
    st = c.state(topic, 0)
    assert st.leader in (2, 3) and 1 not in st.isr and len(st.isr) == 2
    assert c.brokers[1].proc.poll() is None
    assert c.metric(1, "ferry_broker_offline_log_dirs") == 1
    assert broker_log(c, 1).count("is offline") == 1

    filler.unlink()
    wait_for(lambda: len(c.state(topic, 0).isr) == 3, 60, "broker 1 back in the ISR", c)
    assert c.metric(1, "ferry_broker_offline_log_dirs") == 0
    got = consume_all(c.bootstrap, topic, 1, len(first) + len(second))
    assert [v for _, v in got[0]] == first + second  # nothing acknowledged lost, no duplicate, in order
    # the returning replica truncated by leader epoch and copied the rest: the same batches as the leader's
    leader = c.state(topic, 0).leader
    time.sleep(1.0)
    end = len(first) + len(second)
    assert batches_on_disk(c.log_dir(1, topic, 0), end) == batches_on_disk(c.log_dir(leader, topic, 0), end)
    text = broker_log(c, 1)
    assert text.count("is offline") == 1 and text.count("back online") == 1 and "Traceback" not in text


def test_a_failed_fsync_is_a_storage_error_and_the_dir_comes_back(zk_server, tmp_path: Path, monkeypatch) -> None:
    """The fault a tmpfs cannot make: fdatasync failing with EIO in the broker process (its file layer
    swapped by the test through sitecustomize). The acks=-1 produce whose fsync failed is not acknowledged,
    the directory goes offline (no later fsync is trusted), and comes back once fsync works again."""
    trigger = tmp_path / "fdatasync-fails"
    for key, value in failing_fdatasync_env(tmp_path / "inject", trigger).items():
        monkeypatch.setenv(key, value)
    c = ReplicatedCluster(zk_server.connect, tmp_path, 1, FAST, metrics=True)
    try:
        broker = c.brokers[1]
        c.registry.create_topic("eio", 1)
        with WireClient(broker.bootstrap) as client:
            wait_for(lambda: metadata(client, ["eio"])["topics"]["eio"] == (0, {0: (0, 1)}), 30, "leader known")
            assert produce(client, "eio", 0, build_batch([b"durable"]), acks=-1).error == 0
            trigger.touch()
            assert produce(client, "eio", 0, build_batch([b"not acknowledged"]), acks=-1).error == STORAGE_ERROR
            assert fetch(client, "eio", 0, 0).error == STORAGE_ERROR
            assert broker.proc.poll() is None and c.metric(1, "ferry_broker_offline_log_dirs") == 1
            trigger.unlink()
            wait_for(lambda: produce(client, "eio", 0, build_batch([b"after"]), acks=-1).error == 0, 30,
                     "produce accepted again", c)
            values = [v for _, v in decode_values(fetch(client, "eio", 0, 0).records)]
        assert values[0] == b"durable" and values[-1] == b"after"
        text = broker_log(c, 1)
        assert text.count("is offline") == 1 and "EIO" in text and text.count("back online") == 1
        assert "Traceback" not in text
    finally:
        c.stop()
