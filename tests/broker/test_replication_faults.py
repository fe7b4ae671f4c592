"""Replication under faults, with real broker processes and real signals (issue 16's fault tests).

* kill -9 of the leader, ten times, under a continuous idempotent acks=all producer: nothing acknowledged
  lost, nothing duplicated, order kept, the ISR full again and every replica's log byte-identical up to the HW;
* ISR shrink and expand when a follower is SIGSTOPped longer than replica.lag.time.max.ms, as the state
  znode, the real `ferry topics describe --under-replicated` and the leader's log show it;
* acks=all with min.insync.replicas=2 never reports success while two of three brokers are frozen;
* a zombie controller (frozen past its ZooKeeper session) changes nothing after it wakes up.

Every test is bounded in time: a 6 s ZooKeeper session and a 3 s replica lag (FAST), waits with deadlines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from broker_wire import WireClient, build_batch, produce
from confluent_kafka import Producer
from fault_helpers import (
    batch_summary,
    broker_output,
    controller,
    high_watermark,
    produce_to_leader,
    read_values,
    wait_until,
)
from replication_helpers import FAST, ReplicatedCluster, batches_on_disk

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT = 19, 20, 7


@pytest.fixture
def three(zk_server, tmp_path):
    c = ReplicatedCluster(zk_server.connect, tmp_path, 3, FAST)
    yield c
    c.stop()


# ---------------------------------------------------------------------------------------------- producer
@dataclass
class ProducerRun:
    """What a continuous producer sent and what the brokers acknowledged."""

    acked: list[tuple[int, int, int]] = field(default_factory=list)  # (partition, offset, sequence number)
    failed: list[tuple[int, str]] = field(default_factory=list)  # (sequence number, delivery error)
    fatal: list[str] = field(default_factory=list)  # librdkafka errors (fatal idempotence errors included)
    sent: int = 0
    retries: int = 0  # produce requests librdkafka sent again (its statistics): the dedup cases exercised


class ContinuousProducer(threading.Thread):
    """confluent-kafka, acks=all, enable.idempotence=true: sequence numbers ``0..limit-1`` as values (partition
    = sequence % partitions, key = the partition), paced, until stop() or the limit. A long
    message.timeout.ms lets librdkafka ride out every election (~6-8 s each) by retrying, which is exactly
    where idempotence matters: a retry of a batch the old leader replicated must not be written twice."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, limit: int, per_second: float) -> None:
        super().__init__(name="continuous-producer", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.limit, self.pause = limit, 1.0 / per_second
        self.run_ = ProducerRun()
        self._stop_asked = threading.Event()
        self._lock = threading.Lock()
        self.unflushed = -1

    def stop(self, timeout: float = 90.0) -> ProducerRun:
        self._stop_asked.set()
        self.join(timeout)
        assert not self.is_alive(), "the producer did not finish delivering in time"
        return self.run_

    def acked_count(self) -> int:
        with self._lock:
            return len(self.run_.acked)

    def run(self) -> None:
        r = self.run_

        def on_error(err) -> None:
            with self._lock:
                if err.fatal():
                    r.fatal.append(str(err))

        def done(err, msg) -> None:
            seq = int(msg.value())
            with self._lock:
                if err is not None:
                    r.failed.append((seq, str(err)))
                else:
                    r.acked.append((msg.partition(), msg.offset(), seq))

        def on_stats(doc: str) -> None:
            retries = sum(b.get("txretries", 0) for b in json.loads(doc).get("brokers", {}).values())
            r.retries = max(r.retries, retries)

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 120_000, "retry.backoff.ms": 100,
                      "socket.connection.setup.timeout.ms": 3000, "error_cb": on_error,
                      "statistics.interval.ms": 500, "stats_cb": on_stats})
        for seq in range(self.limit):
            if self._stop_asked.is_set():
                break
            part = seq % self.partitions
            p.produce(self.topic, value=f"{seq:09d}".encode(), key=str(part).encode(), partition=part,
                      on_delivery=done)
            r.sent += 1
            p.poll(self.pause)
        self.unflushed = p.flush(120)


# ---------------------------------------------------------------------------------------------- checks
def assert_replicas_identical(cluster: ReplicatedCluster, topic: str, partition: int) -> int:
    """Every replica's segment files hold the same batches, byte for byte, below the leader's HW; the HW."""
    leader = cluster.state(topic, partition).leader
    hw = high_watermark(cluster, leader, topic, partition)
    logs = {b: batches_on_disk(cluster.log_dir(b, topic, partition), upto=hw) for b in cluster.brokers}
    ends = {b: (batches[-1][0] if batches else -1) for b, batches in logs.items()}
    for b, batches in logs.items():
        if batches != logs[leader]:
            mine = batch_summary(cluster.log_dir(b, topic, partition), hw)
            theirs = batch_summary(cluster.log_dir(leader, topic, partition), hw)
            first = next((i for i, (x, y) in enumerate(zip(mine, theirs, strict=False)) if x != y),
                         min(len(mine), len(theirs)))
            raise AssertionError(f"{topic}-{partition}: broker {b}'s log differs from leader {leader}'s below "
                                 f"HW {hw} at batch #{first}: {mine[first:first + 3]} vs {theirs[first:first + 3]} "
                                 f"(last bases {ends})")
    assert logs[leader], f"{topic}-{partition}: nothing below the HW {hw}"
    return hw


def assert_exactly_once_in_order(cluster: ReplicatedCluster, topic: str, partitions: int, run: ProducerRun
                                 ) -> int:
    """Each acknowledged sequence number is in its partition at the offset its acknowledgement named, no
    sequence number is in the log twice, and within a partition they increase. Returns the records read."""
    total = 0
    acked_at = {(p, o): s for p, o, s in run.acked}
    for p in range(partitions):
        leader = cluster.state(topic, p).leader
        records = read_values(cluster, leader, topic, p)
        total += len(records)
        seqs = [int(v) for _, v in records]
        dups = sorted({s for s in seqs if seqs.count(s) > 1}) if len(set(seqs)) != len(seqs) else []
        assert not dups, f"partition {p}: sequence numbers written twice: {dups[:20]}"
        assert all(a < b for a, b in zip(seqs, seqs[1:], strict=False)), f"partition {p}: order broken"
        assert all(s % partitions == p for s in seqs), f"partition {p}: a record of another partition"
        at = dict(records)
        lost = [(o, s) for (pp, o), s in acked_at.items() if pp == p and at.get(o) != f"{s:09d}".encode()]
        assert not lost, f"partition {p}: acknowledged but not at their offset: {sorted(lost)[:20]}"
    return total


def stop_and_check_exactly_once(cluster: ReplicatedCluster, topic: str, partitions: int, prod: ContinuousProducer,
                                fault: str) -> tuple[ProducerRun, int]:
    """Stop ``prod`` after a run of ``fault``s and check it all: every message delivered (none failed, no
    fatal error), traffic still flowing at the last fault, ISR full, every replica at the leader's end,
    exactly once in order (assert_exactly_once_in_order), replicas byte-identical. (run, records read)."""
    run = prod.stop()
    assert prod.unflushed == 0, f"{prod.unflushed} messages never delivered"
    assert not run.fatal, f"fatal producer errors: {run.fatal}"
    assert not run.failed, f"{len(run.failed)} delivery failures, e.g. {run.failed[:5]}"
    assert len(run.acked) == run.sent > 1000
    assert run.sent < prod.limit, f"the producer stopped before the last {fault}: some ran without traffic"
    cluster.wait_isr(topic, partitions, 3, timeout=30)
    # the followers' HW trails the leader's by one fetch: let every replica reach the leader's end
    for p in range(partitions):
        leader = cluster.state(topic, p).leader
        end = max(o for pp, o, _ in run.acked if pp == p) + 1
        wait_until(lambda le=leader, p=p, e=end: high_watermark(cluster, le, topic, p) >= e, 30, "the final HW")
    total = assert_exactly_once_in_order(cluster, topic, partitions, run)
    for p in range(partitions):
        wait_until(lambda p=p: assert_replicas_identical(cluster, topic, p), 30, f"identical replicas of {p}")
    return run, total


# ---------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize(("partitions", "kills"), [(1, 10), (3, 4)], ids=["1-partition", "3-partitions"])
def test_kill9_the_leader_repeatedly_under_idempotent_acks_all(three, partitions: int, kills: int):
    """kill -9 the leader ``kills`` times (restarting it each time, once it is back in the ISR) while an
    idempotent acks=all producer runs. Each kill leaves batches the old leader appended and maybe
    replicated but did not acknowledge; librdkafka retries them on the new leader with the same producer id
    and sequence numbers, and the new leader recognises the ones it already copied only if the producer
    state travelled with the log (follower appends update it). The final checks: exactly once, in order,
    ISR full, replicas byte-identical up to the HW."""
    topic = f"kill9-{partitions}"
    three.registry.create_topic(topic, partitions, {"min.insync.replicas": "2"}, replication_factor=3)
    three.wait_isr(topic, partitions, 3)
    prod = ContinuousProducer(three.bootstrap, topic, partitions, limit=10 * 4000, per_second=250)
    prod.start()
    wait_until(lambda: prod.acked_count() >= 100, 30, "the producer's first acknowledgements")
    history = []
    for k in range(kills):
        p = k % partitions
        leader = three.state(topic, p).leader
        acked_before = prod.acked_count()
        three.kill(leader)
        st = three.wait_state(topic, p, lambda s, old=leader: s.leader not in (old, -1), 30, "a new leader")
        three.brokers[leader].start(timeout=60)
        three.wait_isr(topic, partitions, 3, timeout=60)
        history.append((leader, st.leader, st.leader_epoch))
        # the producer got through this election (no stall): acknowledgements keep coming
        wait_until(lambda n=acked_before: prod.acked_count() > n, 30, f"acknowledgements after kill {k + 1}")
    run, total = stop_and_check_exactly_once(three, topic, partitions, prod, "kill")
    assert total >= len(run.acked)
    assert len({new for _old, new, _e in history}) >= 2, history
    print(f"{run.sent} sent, {len(run.acked)} acknowledged, {total} in the log, {run.retries} produce retries, "
          f"elections {history}")


def test_an_idempotent_retry_on_the_new_leader_is_recognised(zk_server, tmp_path):
    """The exactly-once case the kill loop may or may not hit, made deterministic: a batch the old leader
    appended and a follower copied, but that was never acknowledged, is retried by librdkafka on the new
    leader (same producer id and sequence number). The new leader knows it from the replicated log (follower
    appends keep the producer state), answers with the original offset, and writes nothing.

    Leader 1 cannot answer: broker 3, in the ISR, is frozen, and a long replica.lag.time.max.ms keeps it in
    the ISR, so acks=all waits. Broker 2 has the batch when broker 1 is killed; it is first among the
    remaining replicas, so the controller elects it."""
    args = (*FAST, "--override", "replica.lag.time.max.ms=30000")
    c = ReplicatedCluster(zk_server.connect, tmp_path, 3, args)
    try:
        topic = "retry"
        c.registry.create_topic_with_assignment(topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        c.wait_isr(topic, 1, 3)
        acked: list[tuple[bytes, int]] = []
        errors: list[str] = []

        def done(err, msg) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked.append((msg.value(), msg.offset()))

        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                      "message.timeout.ms": 60_000, "request.timeout.ms": 30_000, "retry.backoff.ms": 200})
        p.produce(topic, b"first", partition=0, on_delivery=done)
        assert p.flush(30) == 0 and acked == [(b"first", 0)], (acked, errors)
        c.pause(3)
        try:
            p.produce(topic, b"the-retried-one", partition=0, on_delivery=done)
            p.poll(0)
            wait_until(lambda: any(b"the-retried-one" in raw for _, raw in batches_on_disk(c.log_dir(2, topic, 0))),
                       10, "broker 2 holding the batch")
            p.poll(0.2)
            assert len(acked) == 1, "acknowledged while a frozen ISR member lacks it"
            c.kill(1)
        finally:
            c.resume(3)
        st = c.wait_state(topic, 0, lambda s: s.leader not in (1, -1), 30, "a new leader")
        assert st.leader == 2, st
        assert p.flush(60) == 0, errors
        assert not errors, errors
        assert acked == [(b"first", 0), (b"the-retried-one", 1)], acked  # the original offset
        c.brokers[1].start(timeout=60)
        c.wait_isr(topic, 1, 3, timeout=60)
        p.produce(topic, b"after", partition=0, on_delivery=done)
        assert p.flush(30) == 0 and acked[-1] == (b"after", 2), acked  # nothing written twice in between
        assert [v for _, v in read_values(c, 2, topic, 0)] == [b"first", b"the-retried-one", b"after"]
        wait_until(lambda: assert_replicas_identical(c, topic, 0) == 3, 15, "identical replicas")
    finally:
        c.stop()


def _describe_under_replicated(zk: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "ferry.cli", "topics", "describe", "--under-replicated",
                          "--zookeeper", zk], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_isr_shrinks_when_a_follower_is_frozen_and_expands_when_it_catches_up(three):
    """SIGSTOP a follower for longer than replica.lag.time.max.ms (3 s) while acks=1 traffic flows: the
    leader drops it from the ISR (its own conditional write of the state znode), the CLI lists the partition
    as under-replicated, and the leader logs the shrink. SIGCONT: the follower fetches what it missed, reaches
    the HW and the leader adds it back (logged as an expand); the CLI's list is empty again."""
    topic = "isr"
    three.registry.create_topic_with_assignment(topic, {0: [1, 2, 3]})
    three.wait_isr(topic, 1, 3)
    wait_until(lambda: high_watermark(three, 1, topic, 0) >= 0, 15, "broker 1 leading")
    assert "Topic: isr" not in _describe_under_replicated(three.zk)

    def produce_for(seconds: float) -> int:
        n = 0
        end = time.monotonic() + seconds
        with WireClient(three.brokers[1].bootstrap) as c:
            while time.monotonic() < end:
                res = produce(c, topic, 0, build_batch([f"v{n}".encode()]), acks=1)
                assert res.error == 0, res
                n += 1
                time.sleep(0.02)
        return n

    three.pause(3)
    try:
        produce_for(4.5)  # the follower falls behind while frozen: > 3 s without catching up
        st = three.wait_state(topic, 0, lambda s: s.isr == (1, 2), 15, "ISR without 3")
        assert st.leader == 1
        listing = _describe_under_replicated(three.zk)
        assert "Topic: isr\tPartition: 0\tLeader: 1" in listing and "Isr: 1,2" in listing, listing
        # logged once the leader's conditional write returned: a moment after the znode changed
        wait_until(lambda: "ISR shrink [1, 2, 3] -> [1, 2]" in broker_output(three, 1), 10, "the shrink logged")
    finally:
        three.resume(3)
    produce_for(0.5)
    three.wait_state(topic, 0, lambda s: s.isr == (1, 2, 3), 20, "ISR with 3 again")
    wait_until(lambda: "ISR expand [1, 2] -> [1, 2, 3]" in broker_output(three, 1), 10, "the expand logged")
    assert "Topic: isr" not in _describe_under_replicated(three.zk)
    assert_replicas_identical(three, topic, 0)


def test_acks_all_never_succeeds_with_two_of_three_brokers_frozen(three):
    """With 2 of 3 brokers frozen, acks=all produces to the leader must fail: first by REQUEST_TIMED_OUT or
    NOT_ENOUGH_REPLICAS_AFTER_APPEND (appended locally, the ISR never confirms; the ISR has not shrunk yet),
    then NOT_ENOUGH_REPLICAS (19) once the leader has shrunk its ISR to itself. Never 0: that would be a
    false success, acknowledged data held by one replica only."""
    topic = "frozen"
    three.registry.create_topic_with_assignment(topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    three.wait_isr(topic, 1, 3)
    wait_until(lambda: high_watermark(three, 1, topic, 0) >= 0, 15, "broker 1 leading")
    with WireClient(three.brokers[1].bootstrap, timeout=30) as c:
        assert produce(c, topic, 0, build_batch([b"before"]), acks=-1).error == 0
        three.pause(2)
        three.pause(3)
        try:
            codes = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                res = produce(c, topic, 0, build_batch([f"during{len(codes)}".encode()]), acks=-1)
                codes.append(res.error)
                assert res.error != 0, f"a false success after {codes}"
                assert res.error in (NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT), codes
                if res.error == NOT_ENOUGH_REPLICAS and codes.count(NOT_ENOUGH_REPLICAS) >= 3:
                    break
            assert codes.count(NOT_ENOUGH_REPLICAS) >= 3, codes
            assert three.state(topic, 0).isr == (1,)
            wait_until(lambda: "ISR shrink" in broker_output(three, 1), 10, "the shrink logged")
        finally:
            three.resume(2)
            three.resume(3)
    three.wait_state(topic, 0, lambda s: len(s.isr) == 3, 30, "ISR full again")
    with WireClient(three.brokers[1].bootstrap, timeout=30) as c:
        assert produce(c, topic, 0, build_batch([b"after"]), acks=-1).error == 0


def test_a_zombie_controller_changes_nothing(three):
    """Freeze the controller past its 6 s ZooKeeper session: its /controller node goes, another broker wins
    the election and bumps /controller_epoch. Wake the old one: it still believes it is the controller until
    it notices, and any write it attempts is checked against /controller_epoch's version in the same
    transaction, so no state znode ever goes back to its epoch. It logs that it lost the role; elections
    keep working under the new controller."""
    topic = "zombie"
    three.registry.create_topic(topic, 3, {"min.insync.replicas": "2"}, replication_factor=3)
    three.wait_isr(topic, 3, 3)
    for p in range(3):  # every broker has taken its roles and fetches (acks=-1 waits for the whole ISR)
        produce_to_leader(three, topic, p, [b"warm-up"])
    old, old_epoch = wait_until(lambda: (c := controller(three))[0] > 0 and c, 15, "a controller")

    seen: list[tuple[int, int]] = []  # (partition, controller_epoch) of every state read from now on
    stop = threading.Event()

    def watch_states() -> None:
        while not stop.is_set():
            for p, st in three.registry.partition_states(topic).items():
                seen.append((p, st.controller_epoch))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch_states, daemon=True)
    watcher.start()
    try:
        three.pause(old)
        try:
            # a new controller creates /controller before it bumps /controller_epoch: wait for both
            new, new_epoch = wait_until(
                lambda: (c := controller(three))[0] not in (-1, old) and c[1] > old_epoch and c, 30,
                "another controller with a higher epoch")
            assert new_epoch > old_epoch
            # the new controller acts: the frozen broker is gone, so its leaderships move
            for p in range(3):
                three.wait_state(topic, p, lambda s: old not in s.isr and s.leader not in (old, -1), 30,
                                 f"partition {p} without broker {old}")
        finally:
            three.resume(old)
        wait_until(lambda: f"broker {old} is no longer the controller" in broker_output(three, old), 30,
                   "the old controller noticing")
        wait_until(lambda: old in three.registry.brokers(), 30, f"broker {old} registered again")
        three.wait_isr(topic, 3, 3, timeout=60)  # the zombie rejoins as an ordinary broker
        assert controller(three) == (new, new_epoch)
        # The woken broker fetched on its old connections before it re-registered: a leader that let it back
        # into the ISR then would fight the controller removing it (a storm of state writes). One removal per
        # partition at most.
        removals = [line for line in broker_output(three, new).splitlines()
                    if ": isr [" in line and "controller:" in line]
        assert len(removals) <= 3, removals[:10]
        # elections keep working: kill the third broker; the new controller moves what it led
        victim = next(b for b in (1, 2, 3) if b not in (old, new))
        three.kill(victim)
        for p in range(3):
            three.wait_state(topic, p, lambda s: victim not in s.isr and s.leader not in (victim, -1), 30,
                             f"partition {p} re-elected without {victim}")
    finally:
        stop.set()
        watcher.join(5)
    # Leaders' own ISR changes keep the controller epoch of the state they acted on, so a partition the new
    # controller never had to touch may stay at the old epoch; what may never happen is going back.
    for p in range(3):
        epochs = [e for pp, e in seen if pp == p]
        assert all(a <= b for a, b in zip(epochs, epochs[1:], strict=False)), f"partition {p}: {epochs}"
        assert max(epochs) <= new_epoch, (p, epochs, new_epoch)
    assert max(e for _p, e in seen) == new_epoch  # the new controller did write states (the elections)
