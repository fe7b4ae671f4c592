"""Committed offsets outside the live log: the mirror says so loudly, counts it and carries on from the log
start (never from the end, which would skip data)."""

from __future__ import annotations

import pytest
from mirror_harness import committed_to_end, produce, read_log, wait_for, wait_partitions

from ferry.client.group_store import write_offset
from ferry.mirror.mirror_maker import MirrorConfig, MirrorMaker
from ferry.mirror.status import mirror_status
from ferry.zk.cluster_registry import ClusterRegistry

pytestmark = pytest.mark.slow


def test_offsets_outside_the_live_log_restart_at_the_log_start(cluster_factory, caplog) -> None:
    live = cluster_factory(1, "live")
    offline = cluster_factory(1, "offline")
    with ClusterRegistry(live.zk_connect) as reg:
        reg.create_topic("t", 2)
        wait_partitions(live.bootstrap, "t", 2)
        produce(live.bootstrap, "t", 2, 200)
        # partition 0: an offset past the end (the live topic was re-created, say);
        # partition 1: an offset below the log start, which is what retention deleting unmirrored data
        # looks like to the mirror (the log start is 0 here, so the stored offset is made negative).
        write_offset(reg.client, "ferry-mirror", "t", 0, 1_000_000)
        write_offset(reg.client, "ferry-mirror", "t", 1, -7)
    mm = MirrorMaker(MirrorConfig(live.zk_connect, offline.zk_connect, include="t", audit=False))
    mm.start()
    try:
        wait_for(lambda: committed_to_end(mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror"),
                                          ["t"]), 60, "the mirror to recover both partitions")
        assert read_log(offline.bootstrap, {"t": 2}) == read_log(live.bootstrap, {"t": 2})
        reg_metrics = mm.metrics.registry
        assert reg_metrics.get_sample_value("ferry_mirror_offset_resets_total", {"topic": "t"}) == 1
        assert reg_metrics.get_sample_value("ferry_mirror_data_lost_messages_total", {"topic": "t"}) == 7
        assert any("DATA LOST" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    finally:
        mm.stop()
