"""The two anomalies of high-watermark truncation (KIP-101), reproduced deterministically with real broker
processes, real kill -9 and SIGSTOP, and shown impossible with leader-epoch truncation (the default).

``--override replica.truncation=high-watermark`` makes a replica that becomes follower truncate its log to
its own high watermark (Kafka before 0.11); ``leader-epoch`` makes it ask the new leader where its own
latest leader epoch ends (OffsetForLeaderEpoch) and cut there. Each test runs in both modes and asserts the
anomaly in the first and its absence in the second.

The trick that makes them deterministic: ``replica.fetch.wait.max.ms=20000`` (with the lag and socket
timeouts above it). A follower learns the leader's HW only from Fetch answers; once it holds everything, its
next fetch parks on the leader for 20 s, so its HW stays one produce behind the leader's for that long. The
window in which a follower "has the data but not the HW covering it" — a few milliseconds in production —
lasts 20 s here, and the crashes fall inside it by construction.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fault_helpers import (
    add_broker,
    batch_summary,
    controller,
    empty_cluster,
    high_watermark,
    produce_to_leader,
    read_values,
    wait_until,
)
from replication_helpers import batches_on_disk

from ferry.broker.log.log_manager import (
    CHECKPOINT_FILE,
    REPLICATION_CHECKPOINT_FILE,
    read_checkpoint,
    write_checkpoint,
)
from ferry.broker.log.producer_state import SNAPSHOT_FILE

pytestmark = pytest.mark.slow

MODES = ["high-watermark", "leader-epoch"]
# every broker: a stale follower HW for 20 s (see the module docstring), a 6 s ZooKeeper session
SLOW_HW = ("--zk-session-timeout-ms", "6000", "--flush-ms", "20",
           "--override", "replica.fetch.wait.max.ms=20000", "--override", "replica.lag.time.max.ms=60000",
           "--override", "replica.socket.timeout.ms=30000")


def _cluster(zk_server, tmp_path: Path, mode: str):
    return empty_cluster(zk_server.connect, tmp_path, (*SLOW_HW, "--override", f"replica.truncation={mode}"))


def _start_controller_first(c, others: list[int], extra: dict[int, tuple[str, ...]] | None = None) -> None:
    """Broker 3 first, so it creates /controller (and stays out of the way: it only elects), then the
    others in order."""
    add_broker(c, 3)
    wait_until(lambda: controller(c)[0] == 3, 15, "broker 3 as controller")
    for b in others:
        add_broker(c, b, (extra or {}).get(b, ()))


@pytest.mark.parametrize("mode", MODES)
def test_hw_truncation_loses_acknowledged_data(zk_server, tmp_path, mode: str):
    """Anomaly 1: a follower truncates acknowledged data to its stale HW and then becomes leader.

    1. Brokers 3 (controller), 1, 2; partition 0 on [1, 2, 3] (leader 1), min.insync.replicas=2.
    2. Batch 1 then batch 2 with acks=-1: both acknowledged, so all three replicas hold both. The followers'
       HW is the end of batch 1: the answer carrying batch 2 said so, and their next fetch is parked for 20 s.
    3. SIGSTOP broker 2, kill -9 broker 1. Broker 2 runs with a 20 s ZooKeeper session (the others 6 s), so
       when broker 1's session expires broker 2 is still registered and in the ISR: the controller elects it.
       (With equal sessions both would expire together and 3 would be elected at once: no anomaly to show.)
    4. Broker 3 becomes follower of 2. High-watermark truncation cuts its log to its HW at once: batch 2 is
       gone, and broker 2, frozen, cannot give it back. Leader-epoch truncation must first ask broker 2 where
       epoch 0 ends; broker 2 cannot answer, so broker 3 truncates nothing.
    5. ~2 s later kill -9 broker 2; when its session expires the controller elects 3, the last ISR member.
    6. Read the partition from broker 3: high-watermark mode has lost batch 2, which was acknowledged to an
       acks=-1 producer with min.insync.replicas=2 (the anomaly); leader-epoch mode serves both batches.
    """
    topic = "loss"
    c = _cluster(zk_server, tmp_path, mode)
    try:
        _start_controller_first(c, [1, 2], {2: ("--zk-session-timeout-ms", "20000")})
        c.registry.create_topic_with_assignment(topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        c.wait_isr(topic, 1, 3)
        batch1 = [f"batch1-{i}".encode() for i in range(5)]
        batch2 = [f"batch2-{i}".encode() for i in range(5)]
        assert produce_to_leader(c, topic, 0, batch1) == 0  # acks=-1: every ISR member has it
        assert produce_to_leader(c, topic, 0, batch2) == 5
        assert high_watermark(c, 1, topic, 0) == 10  # acknowledged and committed on the leader
        epoch = c.state(topic, 0).leader_epoch

        c.pause(2)
        c.kill(1)
        st = c.wait_state(topic, 0, lambda s: s.leader != 1 and s.leader_epoch > epoch, 30, "a new leader")
        assert st.leader == 2 and 3 in st.isr, st  # the frozen broker, still registered, leads now
        time.sleep(2.0)  # broker 3 applies "follower of 2" (and in one mode truncates)
        c.kill(2)
        c.wait_state(topic, 0, lambda s: s.leader == 3, 40, "broker 3 elected")
        values = wait_until(lambda: (v := read_values(c, 3, topic, 0)) and v, 20, "broker 3 serving")
        time.sleep(0.5)  # broker 3's HW is its LEO as sole ISR member (flushed every 20 ms): read it settled
        values = read_values(c, 3, topic, 0)
        out = c.brokers[3].log_file.read_text()
        if mode == "high-watermark":
            assert [v for _, v in values] == batch1, "batch 2 should be lost: the anomaly did not reproduce"
            assert "truncated to offset 5" in out
        else:
            assert [v for _, v in values] == batch1 + batch2, "leader-epoch truncation lost acknowledged data"
            assert "truncated to offset" not in out
    finally:
        c.stop()


def _lose_unflushed_tail(data_dir: Path, topic: str, partition: int, keep_below: int) -> None:
    """What a power loss does to a replica whose last writes were still in the page cache: the partition's
    log ends at ``keep_below`` again (cut at a batch boundary), and nothing that describes the lost tail
    survives: indexes and the producer-state snapshot go (rebuilt at open), and the checkpoints lose their
    entry for the partition (so the last segment is verified, and no HW beyond the end is restored)."""
    log_dir = data_dir / f"{topic}-{partition}"
    keep = sum(len(raw) for base, raw in batches_on_disk(log_dir) if base < keep_below)
    segments = sorted(log_dir.glob("*.log"))
    assert len(segments) == 1, segments
    with segments[0].open("r+b") as f:
        f.truncate(keep)
    for pattern in ("*.index", "*.timeindex", SNAPSHOT_FILE):
        for p in log_dir.glob(pattern):
            p.unlink()
    for name in (CHECKPOINT_FILE, REPLICATION_CHECKPOINT_FILE):
        path = data_dir / name
        entries = read_checkpoint(path)
        entries.pop((topic, partition), None)
        write_checkpoint(path, entries)


@pytest.mark.parametrize("mode", MODES)
def test_hw_truncation_leaves_replicas_diverged_after_both_crash(zk_server, tmp_path, mode: str):
    """Anomaly 2: after both replicas crash, the one that restarts first with less data leads and writes
    new data at offsets the other replica still holds old data at; HW truncation never reconciles them.

    1. Brokers 3 (controller), 1, 2; partition 0 on [1, 2] (leader 1), min.insync.replicas=1.
    2. m1 then m2 (one record each) with acks=-1: both replicas hold offsets 0 and 1. The leader's HW is 2;
       the follower's is 1 (its next fetch is parked for 20 s). Wait until broker 1's
       replication-offset-checkpoint holds HW 2 (written every 5 s), so that broker 1 restarts with it.
    3. kill -9 both: broker 1 first, and broker 2 once the controller has seen broker 1's session end and
       moved the leadership to it (ISR (2)). Killed together, the two sessions end in an order ZooKeeper's
       ping phases decide; had broker 2's ended first, the controller would have shrunk the ISR to (1) and
       step 4 could not elect broker 2. Broker 2 also loses its page cache: its log is cut back to m1
       (offset 1 is gone), with the indexes, producer snapshot and checkpoint entries that would describe
       the lost tail (its leader-epoch entry past the cut is dropped by recovery).
    4. Once both are unregistered (partition offline, ISR kept), restart broker 2 alone: it is in the last
       ISR, so it is elected (new leader epoch starting at offset 1) and recovers to LEO 1. m3 (acks=1) takes
       offset 1 — m2's offset on broker 1.
    5. Restart broker 1; it becomes follower of 2. High-watermark truncation cuts at its HW, 2: nothing is
       cut, and it fetches from offset 2. Both replicas hold 2 records and sit in the ISR, but offset 1 is
       m2 on one and m3 on the other, forever (the anomaly; consumers see different data depending on the
       leader). Leader-epoch truncation asks broker 2 where epoch 0 ends (offset 1), cuts m2, copies m3: the
       logs are identical. (m2 is lost in both modes: both replicas crashed and the survivor never had it
       durably — only flushing guards against that; KIP-101 guarantees that the replicas agree.)
    """
    topic = "diverge"
    c = _cluster(zk_server, tmp_path, mode)
    try:
        _start_controller_first(c, [1, 2])
        c.registry.create_topic_with_assignment(topic, {0: [1, 2]}, {"min.insync.replicas": "1"})
        c.wait_isr(topic, 1, 2)
        assert produce_to_leader(c, topic, 0, [b"m1"]) == 0
        assert produce_to_leader(c, topic, 0, [b"m2"]) == 1
        assert high_watermark(c, 1, topic, 0) == 2
        hw_file = c.brokers[1].data_dir / REPLICATION_CHECKPOINT_FILE
        wait_until(lambda: read_checkpoint(hw_file).get((topic, 0)) == 2, 20, "broker 1's HW checkpoint at 2")

        c.kill(1)
        st = c.wait_state(topic, 0, lambda s: s.leader != 1, 30, "broker 1's session over, leadership moved")
        assert st.leader == 2 and st.isr == (2,), st
        c.kill(2)
        _lose_unflushed_tail(c.brokers[2].data_dir, topic, 0, keep_below=1)
        c.wait_state(topic, 0, lambda s: s.leader == -1, 30, "the partition offline")
        assert set(c.registry.brokers()) == {3}

        c.brokers[2].start(timeout=60)
        st = c.wait_state(topic, 0, lambda s: s.leader == 2, 30, "broker 2 elected")
        assert st.isr == (2,)
        wait_until(lambda: high_watermark(c, 2, topic, 0) == 1, 15, "broker 2 recovered to LEO 1 (after m1)")
        assert produce_to_leader(c, topic, 0, [b"m3"], acks=1) == 1  # m2's offset

        c.brokers[1].start(timeout=60)
        c.wait_state(topic, 0, lambda s: s.isr == (1, 2), 30, "broker 1 back in the ISR")
        time.sleep(2.0)  # fetches settle: whatever broker 1 copies, it has copied by now
        log1 = batches_on_disk(c.log_dir(1, topic, 0))
        log2 = batches_on_disk(c.log_dir(2, topic, 0))
        detail = (batch_summary(c.log_dir(1, topic, 0)), batch_summary(c.log_dir(2, topic, 0)))
        assert [v for _, v in read_values(c, 2, topic, 0)] == [b"m1", b"m3"]
        assert [b for b, _ in log1] == [b for b, _ in log2] == [0, 1], detail
        assert log1[0] == log2[0], detail  # m1, byte for byte
        if mode == "high-watermark":
            assert log1[1] != log2[1], f"the replicas should have diverged at offset 1: {detail}"
            assert b"m2" in log1[1][1] and b"m3" in log2[1][1]
        else:
            assert log1 == log2, f"leader-epoch truncation left the replicas diverged: {detail}"
            assert "truncating from 2 to 1" in c.brokers[1].log_file.read_text()
    finally:
        c.stop()
