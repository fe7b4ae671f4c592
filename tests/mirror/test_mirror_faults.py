"""Faults: link cut (live brokers down), offline broker restart, mirror killed with -9. Nothing is lost,
nothing is copied twice, each partition stays in order."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from mirror_harness import (
    MirrorProcess,
    clusters_with_topics,
    dedup_first,
    describe_partition,
    mirrored_to_end,
    produce,
    read_log,
    wait_for,
    wait_partitions,
)

from ferry.mirror.status import mirror_status

pytestmark = pytest.mark.slow

TOPICS = {"events": 4, "orders": 2}


def _status(live, offline):
    return mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror")


def _copied(live, offline) -> int:
    return sum(p.offline_end or 0 for p in _status(live, offline).partitions if p.topic in TOPICS)


def test_no_loss_through_link_cut_offline_restart_and_kill_9(cluster_factory, tmp_path: Path) -> None:
    live, offline = clusters_with_topics(cluster_factory, TOPICS, live_brokers=2, offline_brokers=2)
    args = ("--streams", "2", "--commit-interval", "0.5", "--audit-interval", "1", "--log-level", "INFO")
    mirror = MirrorProcess(tmp_path / "mirror-1.log", live.zk_connect, offline.zk_connect, "events|orders",
                           *args).start()
    produced = 0
    try:
        for t, n in TOPICS.items():
            produce(live.bootstrap, t, n, 2000, tag="p1-")
        produced += 4000
        wait_for(lambda: mirrored_to_end(live, offline, TOPICS), 90, "phase 1 mirrored")

        # 1. the datacenter link is cut: every live broker is down for a while, then comes back
        for b in live.brokers.values():
            b.stop()
        time.sleep(8)
        assert mirror.running, "the mirror must survive a live outage\n" + mirror.log_text()[-3000:]
        for b in live.brokers.values():
            b.start()
        for t, n in TOPICS.items():
            wait_partitions(live.bootstrap, t, n)
            produce(live.bootstrap, t, n, 2000, start=100_000, tag="p2-")
        produced += 4000

        # 2. an offline broker restarts while data is flowing
        def phase3() -> None:
            for t, n in TOPICS.items():
                produce(live.bootstrap, t, n, 6000, start=200_000, tag="p3-")

        th = threading.Thread(target=phase3)
        th.start()
        time.sleep(1.0)
        victim = offline.brokers[1]
        victim.stop()
        time.sleep(3)
        victim.start()
        th.join(120)
        produced += 12_000
        wait_for(lambda: mirrored_to_end(live, offline, TOPICS), 120, "phases 2-3 mirrored")

        # 3. the mirror is killed with -9 while it is copying a stream still being produced
        def phase4() -> None:
            for t, n in TOPICS.items():
                produce(live.bootstrap, t, n, 60_000, start=300_000, tag="p4-")

        before = _copied(live, offline)
        th = threading.Thread(target=phase4)
        th.start()
        wait_for(lambda: _copied(live, offline) > before + 5000, 60, "the mirror to be copying", 0.05)
        assert th.is_alive(), "production ended before the kill: the crash would not be mid-stream"
        mirror.kill()
        th.join(120)
        produced += 120_000
        mirror = MirrorProcess(tmp_path / "mirror-2.log", live.zk_connect, offline.zk_connect,
                               "events|orders", *args).start()
        wait_for(lambda: mirrored_to_end(live, offline, TOPICS), 180, "everything mirrored after -9")

        src = read_log(live.bootstrap, TOPICS)
        dst = read_log(offline.bootstrap, TOPICS)
        assert sum(len(v) for v in src.values()) == produced
        for tp, rows in src.items():
            assert dedup_first(dst[tp]) == rows, f"{tp}: offline is missing or reordering live messages"
            assert len(dst[tp]) == len(rows), f"{tp}: {len(dst[tp]) - len(rows)} messages copied twice"
    finally:
        mirror.stop()


def test_offline_broker_hang_longer_than_the_timeout_is_deduplicated(cluster_factory) -> None:
    """The offline broker freezes (SIGSTOP) with produce requests in flight; the mirror times out, resends,
    and the broker later processes the abandoned requests too: the resends, one batch per request with the
    same sequences, are recognised, so the offline copy has neither gaps nor duplicates."""
    from ferry.mirror.mirror_maker import MirrorConfig, MirrorMaker

    topics = {"events": 2}
    live, offline = clusters_with_topics(cluster_factory, topics)
    mm = MirrorMaker(MirrorConfig(live.zk_connect, offline.zk_connect, include="events", audit=False,
                                  offline_timeout_s=2.0, commit_interval_s=0.5))
    mm.start()
    try:
        stop = threading.Event()

        def keep_producing() -> None:
            # Production goes on through the hang, so that copies are in flight when the broker freezes
            # however fast the mirror drains what came before (bounded: at most 40 rounds of 2,000).
            for k in range(40):
                if stop.is_set():
                    break
                produce(live.bootstrap, "events", 2, 2000, start=k * 2000, tag="h-")

        th = threading.Thread(target=keep_producing)
        th.start()
        try:
            wait_for(lambda: (mm.metrics.registry.get_sample_value("ferry_mirror_messages_total",
                                                                    {"topic": "events"}) or 0) > 2000, 60,
                     "the mirror to be copying", 0.05)
            victim = offline.brokers[1]
            victim.pause()
            time.sleep(5)
            victim.resume()
        finally:
            stop.set()
            th.join(120)
        wait_for(lambda: mirrored_to_end(live, offline, topics), 120, "everything mirrored after the hang")
        errors = mm.metrics.registry.get_sample_value("ferry_mirror_errors_total", {"kind": "produce"})
        assert errors and errors > 0, "the hang did not disturb the mirror: the test tested nothing"
        src = read_log(live.bootstrap, topics)
        dst = read_log(offline.bootstrap, topics)
        for tp, rows in src.items():
            assert dst[tp] == rows, f"{tp}: gaps or duplicates after the offline hang ({len(dst[tp])} vs {len(rows)} " \
                                    f"records; offline {describe_partition(offline.zk_connect, offline.bootstrap, *tp)})"
    finally:
        mm.stop()
