"""Consumer groups with clients nobody here wrote (confluent-kafka/librdkafka, kafka-python, aiokafka), each member
its own process (tests/broker/kafka_group_member.py), against real ferry brokers:

- two members split the partitions, commit, stop, and after a restart resume where they committed: every
  message read exactly once;
- a member killed with SIGKILL: the survivor owns every partition within the session timeout;
- the coordinator's broker killed: the members find the next coordinator, rejoin, and go on from the offsets
  committed before (kept in ZooKeeper), re-reading nothing and skipping nothing.

kcat's balanced consumer (-G) reads a topic through the coordinator too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from broker_wire import WireClient, create_topic, leaders  # noqa: E402 - tests/broker on sys.path (conftest)
from kafka import KafkaProducer

from ferry.wire.protocol.primitives import Writer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MEMBER = Path(__file__).resolve().parent / "kafka_group_member.py"
KINDS = ["confluent", "kafka-python", "aiokafka"]
PARTITIONS = 4
SESSION_MS = 6000
BROKER_ARGS = ("--flush-ms", "10", "--zk-session-timeout-ms", "6000",
               "--override", "group.initial.rebalance.delay.ms=4000")


class Member:
    def __init__(self, kind: str, bootstrap: str, group: str, topic: str, outfile: Path,
                 instance: str | None = None, session_ms: int = SESSION_MS) -> None:
        self.outfile = outfile
        self.log = open(outfile.with_suffix(".log"), "a")  # noqa: SIM115 - closed in stop()/kill()
        self.proc = subprocess.Popen([sys.executable, str(MEMBER), kind, bootstrap, group, topic, str(outfile),
                                      str(session_ms), *([instance] if instance else [])],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def lines(self) -> list[list[str]]:
        if not self.outfile.exists():
            return []
        return [line.rstrip("\n").split(" ", 3) for line in self.outfile.read_text().splitlines()]

    def assignments(self) -> list[set[int]]:
        return [set(int(p) for p in ln[1].split(",") if p) if len(ln) > 1 else set()
                for ln in self.lines() if ln[0] == "a"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.log.close()


def consumed(members: list[Member]) -> list[tuple[int, int, str]]:
    return [(int(ln[1]), int(ln[2]), ln[3]) for m in members for ln in m.lines() if ln[0] == "m"]


def committed(members: list[Member]) -> dict[int, int]:
    out: dict[int, int] = {}
    for m in members:
        for ln in m.lines():
            if ln[0] == "c":
                out[int(ln[1])] = max(out.get(int(ln[1]), 0), int(ln[2]))
    return out


def wait_for(cond, timeout: float, what: str, members: list[Member]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    logs = "\n".join(f"--- {m.outfile.name}: {m.outfile.with_suffix('.log').read_text()[-3000:]}" for m in members)
    raise AssertionError(f"timed out waiting for {what}\n{logs}")


def produce(bootstrap: str, topic: str, tag: str, n: int) -> dict[int, int]:
    """n messages round-robin over the partitions; returns {partition: last offset + 1}."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=20, retry_backoff_ms=300, linger_ms=5)
    ends: dict[int, int] = {}
    try:
        futures = [p.send(topic, value=f"{tag}-{i}".encode(), partition=i % PARTITIONS) for i in range(n)]
        p.flush(60)
        for f in futures:
            md = f.get(30)
            ends[md.partition] = max(ends.get(md.partition, 0), md.offset + 1)
    finally:
        p.close(10)
    return ends


def setup_topic(bootstrap: str, topic: str, rf: int = 1) -> None:
    with WireClient(bootstrap.split(",")[0]) as c:
        assert create_topic(c, topic, PARTITIONS, replication_factor=rf)[0] == 0
        leaders(c, topic, PARTITIONS)


def coordinator_of(bootstrap: str, group: str) -> int:
    with WireClient(bootstrap.split(",")[0]) as c:
        r = c.request(10, 0, bytes(Writer().string(group).buf))
        code, node = r.int16(), r.int32()
        assert code == 0, code
        return node


def split_evenly(members: list[Member]) -> bool:
    last = [m.assignments()[-1] if m.assignments() else set() for m in members]
    return all(len(a) == PARTITIONS // len(members) for a in last) and set().union(*last) == set(range(PARTITIONS))


def assert_exactly_once(got: list[tuple[int, int, str]], expected_values: set[str]) -> None:
    keys = [(p, off) for p, off, _ in got]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    assert not dupes, f"read twice: {dupes[:20]}"
    assert {v for _, _, v in got} == expected_values, \
        f"missing {sorted(expected_values - {v for _, _, v in got})[:20]}"


@pytest.mark.parametrize("kind", KINDS)
def test_two_members_split_commit_restart_and_resume(kind, cluster_factory, tmp_path):
    cluster = cluster_factory(2, extra_args=BROKER_ARGS)
    topic, group = f"split-{kind}", f"g-split-{kind}"
    setup_topic(cluster.bootstrap, topic)
    produce(cluster.bootstrap, topic, "one", 200)
    members = [Member(kind, cluster.bootstrap, group, topic, tmp_path / f"m{i}.txt") for i in range(2)]
    try:
        wait_for(lambda: len(consumed(members)) >= 200, 90, "200 messages", members)
        assert split_evenly(members), [m.assignments() for m in members]
        parts = [{p for p, _, _ in consumed([m])} for m in members]
        assert not parts[0] & parts[1] and len(parts[0]) == len(parts[1]) == 2, parts
        wait_for(lambda: sum(committed(members).values()) == 200, 30, "commits of all 200", members)
    finally:
        for m in members:
            m.stop()
    assert all(m.proc.returncode == 0 for m in members)
    produce(cluster.bootstrap, topic, "two", 200)
    restarted = [Member(kind, cluster.bootstrap, group, topic, tmp_path / f"m{i}.txt") for i in range(2)]
    try:
        wait_for(lambda: len(consumed(restarted)) >= 400, 90, "400 messages", restarted)
        time.sleep(1.0)  # anything read twice would show up now
    finally:
        for m in restarted:
            m.stop()
    assert_exactly_once(consumed(restarted), {f"one-{i}" for i in range(200)} | {f"two-{i}" for i in range(200)})


@pytest.mark.parametrize("kind", KINDS)
def test_killed_member_is_replaced_within_the_session_timeout(kind, cluster_factory, tmp_path):
    cluster = cluster_factory(1, extra_args=BROKER_ARGS)
    topic, group = f"kill-{kind}", f"g-kill-{kind}"
    setup_topic(cluster.bootstrap, topic)
    a, b = (Member(kind, cluster.bootstrap, group, topic, tmp_path / f"{n}.txt") for n in "ab")
    try:
        wait_for(lambda: split_evenly([a, b]), 60, "the partitions split between a and b", [a, b])
        b.kill()
        killed = time.monotonic()
        wait_for(lambda: a.assignments()[-1] == set(range(PARTITIONS)), SESSION_MS / 1000 + 15,
                 "a to own every partition", [a])
        took = time.monotonic() - killed
        # the session timeout, then one heartbeat interval for a to hear of the rebalance, and the rejoin
        assert took < SESSION_MS / 1000 + 5, f"rebalance took {took:.1f}s"
        produce(cluster.bootstrap, topic, "after", 100)
        wait_for(lambda: len(consumed([a])) >= 100, 30, "a to read every partition", [a])
        assert_exactly_once(consumed([a]), {f"after-{i}" for i in range(100)})
    finally:
        a.stop()
        if b.proc.poll() is None:
            b.kill()


@pytest.mark.parametrize("kind", KINDS)
def test_group_survives_its_coordinators_broker(kind, cluster_factory, tmp_path):
    cluster = cluster_factory(2, extra_args=BROKER_ARGS)
    topic, group = f"coord-{kind}", f"g-coord-{kind}"
    setup_topic(cluster.bootstrap, topic, rf=2)
    node = coordinator_of(cluster.bootstrap, group)
    survivor = next(b for i, b in cluster.brokers.items() if i != node)
    members = [Member(kind, cluster.bootstrap, group, topic, tmp_path / f"m{i}.txt") for i in range(2)]
    try:
        wait_for(lambda: split_evenly(members), 60, "the partitions split", members)
        ends = produce(cluster.bootstrap, topic, "before", 200)
        wait_for(lambda: committed(members) == ends, 60, "every message read and committed", members)
        seen = [len(m.assignments()) for m in members]
        cluster.brokers[node].kill()
        # the members rejoin at the survivor (once the dead broker's ZooKeeper session expired) ...
        wait_for(lambda: all(len(m.assignments()) > n for m, n in zip(members, seen, strict=True))
                 and split_evenly(members), 60, "a new generation at the next coordinator", members)
        assert coordinator_of(survivor.bootstrap, group) == survivor.broker_id
        # ... and go on from the offsets committed before: nothing read twice, nothing skipped
        produce(survivor.bootstrap, topic, "after", 200)
        wait_for(lambda: len(consumed(members)) >= 400, 90, "the messages produced after", members)
        time.sleep(1.0)
    finally:
        for m in members:
            m.stop()
    assert_exactly_once(consumed(members), {f"before-{i}" for i in range(200)} | {f"after-{i}" for i in range(200)})


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/setup.sh installs it)")
def test_kcat_balanced_consumer(cluster_factory, tmp_path):
    cluster = cluster_factory(1, extra_args=BROKER_ARGS)
    setup_topic(cluster.bootstrap, "kc")
    produce(cluster.bootstrap, "kc", "kc", 120)
    # no -o: kcat's -o in -G mode re-assigns at that offset; stored offsets (else earliest) is the group's way
    cmd = ["kcat", "-b", cluster.bootstrap, "-G", "kcat-group", "-e", "-q", "-f", "%p %o %s\n",
           "-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=200", "kc"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env={**os.environ})
    assert out.returncode == 0, out.stderr[-2000:]
    values = {line.split(" ", 2)[2] for line in out.stdout.splitlines()}
    assert values == {f"kc-{i}" for i in range(120)}
    # a second run of the same group resumes after what the first committed: nothing more to read
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert again.returncode == 0 and again.stdout.strip() == "", again.stdout[:500]


def test_static_member_restarts_without_a_rebalance(cluster_factory, tmp_path):
    """KIP-345 with librdkafka: a static member (group.instance.id) leaves no LeaveGroup when it stops and comes
    back under a new member id with its old assignment; the other member sees no rebalance."""
    cluster = cluster_factory(1, extra_args=BROKER_ARGS)
    topic, group = "static", "g-static"
    setup_topic(cluster.bootstrap, topic)
    session = 20_000  # long enough for the restart to come back within it
    a = Member("confluent", cluster.bootstrap, group, topic, tmp_path / "a.txt", "host-a", session)
    b = None
    try:
        # a first, so that it leads the group (a restarted static leader rebalances, as in Kafka before KIP-814)
        wait_for(lambda: a.assignments() and a.assignments()[-1] == set(range(PARTITIONS)), 60, "a alone", [a])
        b = Member("confluent", cluster.bootstrap, group, topic, tmp_path / "b.txt", "host-b", session)
        wait_for(lambda: split_evenly([a, b]), 60, "the partitions split between a and b", [a, b])
        before_a, before_b = a.assignments(), b.assignments()[-1]
        b.stop()
        b2 = Member("confluent", cluster.bootstrap, group, topic, tmp_path / "b2.txt", "host-b", session)
        try:
            wait_for(lambda: b2.assignments() and b2.assignments()[-1], 30, "b back with its partitions", [b2])
            assert b2.assignments()[-1] == before_b
            produce(cluster.bootstrap, topic, "s", 40)
            wait_for(lambda: len(consumed([a, b2])) >= 40, 30, "every message", [a, b2])
            assert a.assignments() == before_a, "the other member was rebalanced"
            assert_exactly_once(consumed([a, b2]), {f"s-{i}" for i in range(40)})
        finally:
            b2.stop()
    finally:
        a.stop()
        if b is not None:
            b.stop()
