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
from ferry.zk.cluster_registry import ClusterRegistry


def _stutter(broker, stop: threading.Event, frozen_s: float = 0.25, running_s: float = 0.15) -> None:
    """Freeze and thaw a broker until ``stop``: its answers come late, in bursts."""
    while not stop.is_set():
        broker.pause()
        time.sleep(frozen_s)
        broker.resume()
        time.sleep(running_s)


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
    slow = threading.Thread(target=_stutter, args=(offline.brokers[1], stop), daemon=True)
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
