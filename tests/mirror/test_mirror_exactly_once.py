"""Exactly once: the mirror copies every live message into the offline cluster once, byte-identical and in
order, and its audit tier counts each once, while a steady stream flows and the mirror is killed with -9
ten times, cut from the live ZooKeeper for 30 s, its offline broker restarted, or two mirror processes
rebalance with one of them frozen past its session (a zombie that wakes up with produce requests to send).
Real processes throughout (docs/mirror.md, "Exactly once")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from mirror_harness import (
    MirrorProcess,
    SteadyProducer,
    audit_counts,
    clusters_with_topics,
    describe_partition,
    mirrored_to_end,
    read_log,
    wait_for,
)

from ferry.mirror.status import mirror_status

pytestmark = pytest.mark.slow

TOPICS = {"events": 4, "orders": 2}
ARGS = ("--streams", "2", "--commit-interval", "0.5", "--audit-interval", "1")


def _copied(live, offline) -> int:
    return sum(p.offline_end or 0 for p in mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror").partitions
               if p.topic in TOPICS)


def _assert_exactly_once(live, offline, produced: int, counts) -> None:
    """Every live message once offline, byte-identical, in order; the mirror tier's books equal the producers'."""
    wait_for(lambda: mirrored_to_end(live, offline, TOPICS),
             180, "the mirror to checkpoint every partition to its end")
    src, dst = read_log(live.bootstrap, TOPICS), read_log(offline.bootstrap, TOPICS)
    assert sum(len(v) for v in src.values()) == produced
    for tp, rows in src.items():
        extra = len(dst[tp]) - len(rows)
        assert dst[tp] == rows, f"{tp}: offline differs from live ({extra:+d} messages; duplicates if positive; offline " \
                                f"{describe_partition(offline.zk_connect, offline.bootstrap, *tp)})"
    wait_for(lambda: audit_counts(offline.bootstrap, "mirror") == counts, 60,
             "the mirror tier's audit counts to equal the producers'", 2.0)


def test_ten_kill_9s_during_a_steady_stream(cluster_factory, tmp_path: Path) -> None:
    live, offline = clusters_with_topics(cluster_factory, TOPICS)
    steady = SteadyProducer(live.bootstrap, TOPICS, rate=3000).start()
    mirror = MirrorProcess(tmp_path / "mirror-0.log", live.zk_connect, offline.zk_connect, "events|orders",
                           *ARGS).start()
    try:
        for k in range(1, 11):
            before = _copied(live, offline)
            wait_for(lambda b=before: _copied(live, offline) > b + 1000, 90, f"copying before kill {k}", 0.1)
            mirror.kill()
            mirror = MirrorProcess(tmp_path / f"mirror-{k}.log", live.zk_connect, offline.zk_connect,
                                   "events|orders", *ARGS).start()
        produced = steady.stop()
        mirror.stop()  # SIGTERM: the last counts are published on the way out
        mirror = MirrorProcess(tmp_path / "mirror-last.log", live.zk_connect, offline.zk_connect, "events|orders",
                               *ARGS).start()
        _assert_exactly_once(live, offline, produced, steady.counts)
    finally:
        steady.close()
        mirror.stop()


def test_a_30s_live_zookeeper_cut_and_an_offline_broker_restart(cluster_factory, zk_server, tmp_path: Path) -> None:
    from tests.client.group_helpers import TcpProxy

    live, offline = clusters_with_topics(cluster_factory, TOPICS)
    host, port = zk_server.connect.split(":")
    proxy = TcpProxy(host, int(port))
    live_zk = f"127.0.0.1:{proxy.port}{live.zk_connect[len(zk_server.connect):]}"
    steady = SteadyProducer(live.bootstrap, TOPICS, rate=3000).start()
    mirror = MirrorProcess(tmp_path / "mirror.log", live_zk, offline.zk_connect, "events|orders", *ARGS).start()
    try:
        wait_for(lambda: _copied(live, offline) > 3000, 90, "the mirror to be copying", 0.1)
        proxy.cut()  # the mirror's live ZooKeeper session expires (6 s); the live brokers keep theirs
        time.sleep(30)
        proxy.restore()
        before = _copied(live, offline)
        wait_for(lambda: _copied(live, offline) > before + 3000, 90, "copying again after the cut", 0.1)
        victim = offline.brokers[1]
        victim.stop()
        time.sleep(3)
        victim.start()
        before = _copied(live, offline)
        wait_for(lambda: _copied(live, offline) > before + 3000, 90, "copying again after the restart", 0.1)
        produced = steady.stop()
        _assert_exactly_once(live, offline, produced, steady.counts)
        assert mirror.running, mirror.log_text()[-3000:]
    finally:
        steady.close()
        mirror.stop()
        proxy.close()


def test_two_mirrors_rebalance_under_load_with_a_zombie(cluster_factory, tmp_path: Path) -> None:
    """Mirror B joins while A copies (A hands half over); A freezes (SIGSTOP) past its session timeout, B
    takes everything; A wakes up still believing it owns its partitions, with batches ready to send; B
    leaves cleanly at the end. Every batch A sends as a zombie is refused or is the very batch B would
    send: the offline copy stays exact."""
    live, offline = clusters_with_topics(cluster_factory, TOPICS)
    steady = SteadyProducer(live.bootstrap, TOPICS, rate=3000).start()

    def start(name: str) -> MirrorProcess:
        return MirrorProcess(tmp_path / f"{name}.log", live.zk_connect, offline.zk_connect, "events|orders",
                             *ARGS, "--consumer-id", name).start()

    def owners() -> set[str | None]:
        return {p.owner for p in mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror").partitions
                if p.topic in TOPICS}

    a = start("mirror-a")
    b = None
    try:
        wait_for(lambda: _copied(live, offline) > 3000, 90, "mirror A to be copying", 0.1)
        b = start("mirror-b")
        wait_for(lambda: owners() == {"mirror-a", "mirror-b"}, 60, "A and B to share the partitions")
        before = _copied(live, offline)
        wait_for(lambda: _copied(live, offline) > before + 3000, 90, "both copying", 0.1)
        a.pause()
        wait_for(lambda: owners() == {"mirror-b"}, 60, "B to take over A's partitions")
        time.sleep(2)
        a.resume()  # a zombie for as long as it takes to notice its lost session
        wait_for(lambda: owners() == {"mirror-a", "mirror-b"}, 60, "A to rejoin")
        before = _copied(live, offline)
        wait_for(lambda: _copied(live, offline) > before + 3000, 90, "both copying again", 0.1)
        b.stop()
        wait_for(lambda: owners() == {"mirror-a"}, 60, "A to take B's partitions")
        produced = steady.stop()
        _assert_exactly_once(live, offline, produced, steady.counts)
    finally:
        steady.close()
        a.stop()
        if b is not None:
            b.stop()
