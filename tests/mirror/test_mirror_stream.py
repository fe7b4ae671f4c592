"""A MirrorStream handing a partition back with batches in flight and getting it again (real brokers): the
requests that land after the hand-over are found in the offline log, not sent again."""

from __future__ import annotations

import threading
import time

import pytest
from mirror_harness import produce, read_log, wait_for, wait_partitions

from ferry.client.wire_client import WireClient
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_stream import MirrorStream
from ferry.zk.cluster_registry import ClusterRegistry

pytestmark = pytest.mark.slow


def test_revoked_with_unknown_outcomes_then_reassigned_is_exact(cluster_factory) -> None:
    live = cluster_factory(1, "live")
    offline = cluster_factory(1, "offline")
    for c in (live, offline):
        with ClusterRegistry(c.zk_connect) as reg:
            reg.create_topic("t", 1)
        wait_partitions(c.bootstrap, "t", 1)
    metrics = MirrorMetrics()
    stream = MirrorStream(0, WireClient(live.bootstrap), WireClient(offline.bootstrap, timeout_s=1.0), metrics,
                          fetch_wait_ms=100)
    stream.start()
    producer = threading.Thread(target=lambda: produce(live.bootstrap, "t", 1, 60_000, compression="none"))
    producer.start()
    try:
        stream.assign({("t", 0): 0})
        wait_for(lambda: stream.committable().get(("t", 0), 0) > 2000, 60, "the stream to copy", 0.02)
        victim = offline.brokers[1]
        victim.pause()  # produce requests in flight: their outcome becomes unknown (1 s timeout)
        time.sleep(2.5)
        handed_back = stream.revoke({("t", 0)})
        victim.resume()
        time.sleep(1.0)  # the broker now processes what was sent before it froze
        assert handed_back[("t", 0)].live > 0
        # back again: where to go on is read from the offline log (the requests that landed after the revoke
        # included), not taken from what this stream remembers
        stream.assign({("t", 0): None})
        producer.join(120)
        end = WireClient(live.bootstrap).list_offsets({("t", 0): -1})[("t", 0)].offset
        wait_for(lambda: stream.committable().get(("t", 0)) == end, 60, "the stream to finish")
        assert read_log(offline.bootstrap, {"t": 1}) == read_log(live.bootstrap, {"t": 1})
        assert metrics.registry.get_sample_value("ferry_mirror_syncs_total", {"kind": "takeover"}) == 2
        assert metrics.registry.get_sample_value("ferry_mirror_errors_total", {"kind": "produce"}) > 0
    finally:
        producer.join(120)
        stream.stop()
