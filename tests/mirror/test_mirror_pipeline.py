"""Pipelined rounds (issue 20 goal 2): a mirror stream keeps fetching and producing while earlier rounds' produce
requests await the offline cluster's answers, and that changes nothing it guarantees. Real brokers; the offline
one is slowed by freezing it (SIGSTOP) for moments, so answers are late while live data keeps coming."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from mirror_harness import (
    MirrorProcess,
    SteadyProducer,
    audit_counts,
    clusters_with_topics,
    mirrored_to_end,
    produce,
    read_log,
    wait_for,
    wait_partitions,
)

from ferry.client.wire_client import WireClient
from ferry.embedded import free_port
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_stream import MirrorStream
from ferry.mirror.partition_mirror import PartitionMirror, PendingBatch
from ferry.wire.record.record_batch import RecordBatchHeader
from ferry.zk.cluster_registry import ClusterRegistry


def _stutter(broker, stop: threading.Event, frozen_s: float = 0.25, running_s: float = 0.15) -> None:
    """Freeze and thaw a broker until ``stop``: its answers come late, in bursts."""
    while not stop.is_set():
        broker.pause()
        time.sleep(frozen_s)
        broker.resume()
        time.sleep(running_s)


@pytest.mark.slow
def test_rounds_overlap_against_a_slowed_offline_broker_and_copies_stay_exact(cluster_factory) -> None:
    live = cluster_factory(1, "live")
    offline = cluster_factory(1, "offline")
    for c in (live, offline):
        with ClusterRegistry(c.zk_connect) as reg:
            reg.create_topic("t", 2)
        wait_partitions(c.bootstrap, "t", 2)
    expected = produce(live.bootstrap, "t", 2, 30_000, compression="none", config={"batch.num.messages": 100})
    metrics = MirrorMetrics()
    # small coalesced batches: many of them per partition, so the pipeline fills
    stream = MirrorStream(0, WireClient(live.bootstrap), WireClient(offline.bootstrap), metrics, fetch_wait_ms=100,
                          coalesce_bytes=16 << 10)
    stop = threading.Event()
    # short thaws: a few answers get out in each, so rounds find some of theirs answered and others not (with
    # long ones all five could come back between two looks, a round's depth then never above 1 by chance)
    slow = threading.Thread(target=_stutter, args=(offline.brokers[1], stop, 0.25, 0.04), daemon=True)
    counts: Counter = Counter()
    stream.start()
    try:
        stream.assign({("t", 0): 0, ("t", 1): 0})
        slow.start()
        ends = WireClient(live.bootstrap).offsets({("t", 0): -1, ("t", 1): -1})

        def done() -> bool:
            for p in stream.take_progress().values():
                counts.update(p.counts)
            return stream.committable() == ends

        wait_for(done, 90, "the stream to copy everything", 0.05)
    finally:
        stop.set()
        slow.join(5)
        offline.brokers[1].resume()
        stream.stop()
    assert stream.max_rounds_in_flight >= 2, "no round was produced while an earlier one awaited its answers"
    assert stream.overlapped_rounds > 0
    assert metrics.registry.get_sample_value("ferry_mirror_overlapped_rounds_total") == stream.overlapped_rounds
    assert read_log(offline.bootstrap, {"t": 2}) == read_log(live.bootstrap, {"t": 2})  # bytes and order
    assert {("t", bucket): n for bucket, n in counts.items() if n} == expected  # audit: each record once


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


@pytest.mark.slow
def test_kill_9_with_rounds_in_flight_leaves_every_message_once(cluster_factory, tmp_path: Path) -> None:
    """The offline broker frozen while live data keeps coming: the mirror keeps fetching and sends several
    rounds of produce requests that stay unanswered; it is killed -9 then, and the broker thaws and writes
    what its socket holds. The next mirror syncs from the offline log: every live message is there once, in
    order, counted once."""
    topics = {"events": 2}
    live, offline = clusters_with_topics(cluster_factory, topics)
    steady = SteadyProducer(live.bootstrap, topics, rate=3000).start()
    port = free_port("127.0.0.1")
    args = ("--commit-interval", "0.5", "--audit-interval", "1")
    mirror = MirrorProcess(tmp_path / "mirror-0.log", live.zk_connect, offline.zk_connect, "events", *args,
                           "--metrics-listen", f"127.0.0.1:{port}").start()
    victim = offline.brokers[1]
    try:
        def copying() -> bool:
            try:
                return _metric(port, "ferry_mirror_messages_total") > 3000
            except OSError:
                return False

        wait_for(copying, 90, "the mirror to copy", 0.1)
        victim.pause()
        try:
            wait_for(lambda: _metric(port, "ferry_mirror_produce_rounds_in_flight") >= 2, 30,
                     "several rounds in flight", 0.05)
            mirror.kill()
        finally:
            victim.resume()
        mirror = MirrorProcess(tmp_path / "mirror-1.log", live.zk_connect, offline.zk_connect, "events",
                               *args).start()
        time.sleep(2)
        produced = steady.stop()
        wait_for(lambda: mirrored_to_end(live, offline, topics), 120, "the next mirror to copy to the end")
        src, dst = read_log(live.bootstrap, topics), read_log(offline.bootstrap, topics)
        assert sum(len(v) for v in src.values()) == produced
        for tp, rows in src.items():
            assert dst[tp] == rows, f"{tp}: {len(dst[tp]) - len(rows):+d} messages offline"
        wait_for(lambda: audit_counts(offline.bootstrap, "mirror") == steady.counts, 60,
                 "the mirror tier's counts to equal the producer's", 1.0)
    finally:
        steady.close()
        victim.resume()
        mirror.stop()


def _partition_with(n: int) -> tuple[PartitionMirror, list[PendingBatch]]:
    pm = PartitionMirror("t", 0, None)
    pm.start(0, 0, 0, 0)
    pm.solo = False
    batches = []
    for i in range(n):  # batch i: live offsets [10i, 10i + 10), sequences the same
        h = RecordBatchHeader(10 * i, 0, 0, 2, 0, 0, 9, 0, 0, 1, 0, 10 * i, 10)
        batches.append(PendingBatch(bytearray(8), 0, 8, h, 10 * i, 10 * i, end_offset=10 * i + 10))
        pm.add_pending(batches[-1])
    return pm, batches


def _fly(pm: PartitionMirror, batches: list[PendingBatch]) -> None:
    for b in batches:
        b.in_flight = True
    pm.in_flight += len(batches)


def _land(pm: PartitionMirror, b: PendingBatch, acked: bool) -> None:
    b.in_flight, b.acked = False, acked
    b.offline_offset = b.resume_offset
    pm.in_flight -= 1


def test_a_failed_answer_in_the_middle_holds_commits_and_sends_behind_it() -> None:
    """The stream's rules for a partition with rounds in flight (what StreamProducer applies to answers): the
    window is max_in_flight unacknowledged batches; a failure in the middle keeps the commit at the hole
    although later batches are acknowledged, and nothing is sent until every answer of the partition is in,
    then the failed batch first."""
    pm, b = _partition_with(7)
    assert pm.sendable(5) == b[:5]
    _fly(pm, b[:2])  # round 1
    assert pm.sendable(5) == b[2:5]  # round 2 adds behind them, up to the window
    _fly(pm, b[2:5])
    assert pm.sendable(5) == []
    _land(pm, b[0], acked=True)
    pm.drop_acked_prefix()
    assert pm.commit_offset() == 10 and pm.sendable(5) == [b[5]]
    _land(pm, b[1], acked=False)  # failed (e.g. a timeout: written or not, unknown)
    assert pm.waiting_behind_failure(b[2]) and not pm.waiting_behind_failure(b[1])
    _land(pm, b[2], acked=True)  # it had been written after all: a later batch is acknowledged
    assert pm.drop_acked_prefix() == [] and pm.commit_offset() == 10  # not past the hole
    assert pm.sendable(5) == []  # b[1] must not overtake b[3], b[4] still in flight
    _land(pm, b[3], acked=False)
    _land(pm, b[4], acked=False)  # out of order behind the hole
    assert pm.sendable(5) == [b[1], b[3], b[4], b[5], b[6]]  # resent in order, the hole first
    _fly(pm, [b[1]])
    _land(pm, b[1], acked=True)  # a duplicate answer: it was there
    assert [x.end_offset for x in pm.drop_acked_prefix()] == [20, 30] and pm.commit_offset() == 30
    _fly(pm, [b[3]])
    dropped = pm.drop_from(b[3])  # a split: its answer still due is ignored, nothing sent till it lands
    again = PendingBatch(bytearray(8), 0, 8, b[3].header, 30, 30, end_offset=40)  # re-fetched, same sequence
    pm.add_pending(again)
    assert all(x.dropped for x in dropped) and pm.sendable(5) == []
    _land(pm, b[3], acked=False)
    assert pm.sendable(5) == [again]
