"""Two mirror processes in one group share the live partitions (Algorithm 1) and hand them over cleanly."""

from __future__ import annotations

import time

import pytest
from mirror_harness import (
    clusters_with_topics,
    committed_to_end,
    mirrored_to_end,
    produce,
    read_log,
    wait_for,
)

from ferry.mirror.mirror_maker import MirrorConfig, MirrorMaker
from ferry.mirror.status import mirror_status

pytestmark = pytest.mark.slow

TOPICS = {"events": 6, "orders": 3}


def test_two_mirrors_share_partitions_and_hand_over_without_loss_or_duplicates(cluster_factory) -> None:
    live, offline = clusters_with_topics(cluster_factory, TOPICS, live_brokers=2)

    def config(name: str) -> MirrorConfig:
        return MirrorConfig(live.zk_connect, offline.zk_connect, include="events|orders", streams=2,
                            consumer_id=name, commit_interval_s=0.5)

    a = MirrorMaker(config("mirror-a")).start()
    b = MirrorMaker(config("mirror-b")).start()
    try:
        everything = {(t, p) for t, n in TOPICS.items() for p in range(n)}

        def shared() -> bool:
            oa, ob = a.owned_partitions(), b.owned_partitions()
            return bool(oa) and bool(ob) and not (oa & ob) and (oa | ob) == everything

        wait_for(shared, 60, "both mirrors to own a share of the partitions")
        owners = {p.owner for p in mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror").partitions}
        assert owners == {"mirror-a", "mirror-b"}
        for t, n in TOPICS.items():
            produce(live.bootstrap, t, n, 3000, tag="one-")
        wait_for(lambda: mirrored_to_end(live, offline, TOPICS), 90, "both mirrors to copy their share")

        # a clean stop hands every partition over at exactly the acknowledged offset
        a.stop()
        wait_for(lambda: b.owned_partitions() == everything, 60, "the remaining mirror to take over")
        for t, n in TOPICS.items():
            produce(live.bootstrap, t, n, 3000, start=50_000, tag="two-")
        wait_for(lambda: mirrored_to_end(live, offline, TOPICS), 90, "the remaining mirror to copy everything")
        src = read_log(live.bootstrap, TOPICS)
        dst = read_log(offline.bootstrap, TOPICS)
        assert sum(len(v) for v in src.values()) == 12_000
        for tp, rows in src.items():
            assert dst[tp] == rows, f"{tp}: offline differs from live"
    finally:
        a.stop()
        b.stop()


def test_roundrobin_spreads_one_partition_topics_over_two_mirrors(cluster_factory) -> None:
    """Six one-partition topics: range (Algorithm 1 per topic) would give all six to the first member;
    the mirror's default, roundrobin, deals them 3/3."""
    topics = {f"solo-{i}": 1 for i in range(6)}
    live, offline = clusters_with_topics(cluster_factory, topics)

    def config(name: str) -> MirrorConfig:
        return MirrorConfig(live.zk_connect, offline.zk_connect, include="solo-.*", consumer_id=name,
                            commit_interval_s=0.5, audit=False, schemas=False)

    assert config("x").assignment_strategy == "roundrobin"
    a = MirrorMaker(config("mirror-a")).start()
    b = MirrorMaker(config("mirror-b")).start()
    try:
        everything = {(t, 0) for t in topics}

        def split_evenly() -> bool:
            oa, ob = a.owned_partitions(), b.owned_partitions()
            return len(oa) == len(ob) == 3 and (oa | ob) == everything

        wait_for(split_evenly, 60, "each mirror to own three of the six topics")
        for t in topics:
            produce(live.bootstrap, t, 1, 50, tag=f"{t}-")
        wait_for(lambda: mirrored_to_end(live, offline, topics), 90, "both mirrors to copy their topics")
        assert read_log(offline.bootstrap, topics) == read_log(live.bootstrap, topics)
    finally:
        a.stop()
        b.stop()


def test_assignment_strategy_flag() -> None:
    from ferry.cli import build_parser

    parser = build_parser("mirror")
    base = ["mirror", "--source-zookeeper", "zk:1/a", "--target-zookeeper", "zk:1/b", "--include", "x"]
    assert parser.parse_args(base).assignment_strategy == "roundrobin"
    assert parser.parse_args([*base, "--assignment-strategy", "range"]).assignment_strategy == "range"
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--assignment-strategy", "sticky"])
    with pytest.raises(ValueError, match="assignment-strategy"):
        MirrorConfig("zk:1/a", "zk:1/b", include="x", assignment_strategy="sticky").validate()


def test_coalesce_bytes_flag(capsys) -> None:
    from ferry.cli import build_parser, main
    from ferry.mirror.mirror_limits import COALESCE_BYTES

    parser = build_parser("mirror")
    base = ["mirror", "--source-zookeeper", "zk:1/a", "--target-zookeeper", "zk:1/b", "--include", "x"]
    assert parser.parse_args(base).coalesce_bytes == COALESCE_BYTES
    assert parser.parse_args([*base, "--coalesce-bytes", "0"]).coalesce_bytes == 0
    assert main([*base, "--coalesce-bytes", "-5"]) == 2  # refused before anything starts, naming the value given
    assert "coalesce_bytes must be 0 (off) or positive (got -5)" in capsys.readouterr().err


def test_a_session_lost_with_copies_not_checkpointed_resumes_where_the_offline_data_ends(cluster_factory,
                                                                                          zk_server) -> None:
    """The mirror's link to the live ZooKeeper is cut after it copied records its checkpoint does not cover
    yet (checkpoints here only at the start and at hand-over): its session expires and the hand-over's
    checkpoint cannot reach ZooKeeper. When the partitions come back, the sync against the offline log
    resumes where the copies end, not at the older checkpoint, so nothing is copied twice."""
    from tests.client.group_helpers import TcpProxy

    topics = {"t": 2}
    live, offline = clusters_with_topics(cluster_factory, topics)
    host, port = zk_server.connect.split(":")
    proxy = TcpProxy(host, int(port))
    chroot = live.zk_connect[len(zk_server.connect):]
    cfg = MirrorConfig(f"127.0.0.1:{proxy.port}{chroot}", offline.zk_connect, include="t", commit_interval_s=3600,
                       audit_interval_s=3600, zk_session_timeout_s=4.0)
    m = MirrorMaker(cfg).start()
    try:
        produce(live.bootstrap, "t", 2, 1600, tag="a-")
        wait_for(lambda: sum(len(v) for v in read_log(offline.bootstrap, topics).values()) == 1600, 60,
                 "the records copied")
        status = mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror")
        assert not committed_to_end(status, topics)  # copied but not checkpointed: the case under test
        proxy.cut()
        wait_for(lambda: not m.owned_partitions(), 60, "the mirror to pause on the lost connection")
        time.sleep(cfg.zk_session_timeout_s + 4)  # the server expires the session meanwhile
        proxy.restore()
        wait_for(lambda: len(m.owned_partitions()) == 2, 60, "the partitions to come back")
        produce(live.bootstrap, "t", 2, 200, start=20_000, tag="c-")
        wait_for(lambda: sum(len(v) for v in read_log(offline.bootstrap, topics).values()) >= 1800, 60,
                 "the third records copied")
        time.sleep(2)  # anything copied twice would arrive by now
        src, dst = read_log(live.bootstrap, topics), read_log(offline.bootstrap, topics)
        assert sum(len(v) for v in src.values()) == 1800
        for tp, rows in src.items():
            assert dst[tp] == rows, f"{tp}: offline differs from live ({len(dst[tp])} vs {len(rows)} records)"
        assert m.metrics.registry.get_sample_value("ferry_mirror_syncs_total", {"kind": "takeover"}) == 4
    finally:
        m.stop()
        proxy.close()
