"""Round trip through real brokers: records produced without a timestamp (-1) are mirrored with -1 and the
mirror tier counts them in the same bucket as the producer tier (real ZooKeeper, brokers, mirror)."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import Producer as RdProducer
from mirror_harness import audit_counts, clusters_with_topics, mirrored_to_end, read_log, wait_for

from ferry.client.audit.bucket import bucket_start
from ferry.client.producer import Producer
from ferry.mirror.mirror_maker import MirrorConfig, MirrorMaker

pytestmark = pytest.mark.slow

T0 = (int(time.time() * 1000) // 3_600_000 - 2) * 3_600_000 + 1_000  # 2 h ago, inside one bucket


def test_records_without_a_timestamp_are_mirrored_as_they_are_and_the_books_balance(cluster_factory) -> None:
    topics = {"events": 1, "raw": 1, "_audit": 1}
    live, offline = clusters_with_topics(cluster_factory, topics)
    # ferry's audited producer: small batches (one per flush) each led by a record without a timestamp, so the
    # mirror coalesces runs whose first record is -1 followed by records with a time
    with Producer(live.bootstrap, application="app", datacenter="live", audit_interval_s=1.0) as app:
        for i in range(12):
            app.send("events", b"none-a-%d" % i, partition=0, timestamp_ms=-1)
            app.send("events", b"timed-%d" % i, partition=0, timestamp_ms=T0 + i)
            app.send("events", b"none-b-%d" % i, partition=0, timestamp_ms=-1)
            app.flush()
    # a plain librdkafka producer, lz4 (compressed runs are re-built by aiokafka's builder)
    raw = RdProducer({"bootstrap.servers": live.bootstrap, "compression.type": "lz4", "linger.ms": 0})
    for i in range(10):
        raw.produce("raw", b"r-none-%d" % i, partition=0, timestamp=-1)
        raw.produce("raw", b"r-timed-%d" % i, partition=0, timestamp=T0 + 100 + i)
        raw.flush(30)
    src = read_log(live.bootstrap, {"events": 1, "raw": 1})
    stamps = [ts for rows in src.values() for *_, ts in rows]
    assert stamps.count(-1) == 24 + 10, "the live log does not hold the -1 timestamps the test needs"
    expected = Counter({(tp[0], bucket_start(ts)): 0 for tp, rows in src.items() for *_, ts in rows})
    for tp, rows in src.items():
        for *_, ts in rows:
            expected[(tp[0], bucket_start(ts))] += 1

    mm = MirrorMaker(MirrorConfig(live.zk_connect, offline.zk_connect, include=".*", datacenter="offline"))
    mm.start()
    try:
        wait_for(lambda: mirrored_to_end(live, offline, list(topics)), 120, "the mirror to copy every partition")
        dst = read_log(offline.bootstrap, {"events": 1, "raw": 1})
        assert dst == src  # keys, values, headers and timestamps (-1 included) byte for byte
        mm.commit(force_audit=True)
        assert audit_counts(offline.bootstrap, "mirror") == expected
        # the producer tier counted the same records in the same buckets (its events came through the mirror)
        produced = audit_counts(offline.bootstrap, "producer")
        assert produced == Counter({k: v for k, v in expected.items() if k[0] == "events"})
        assert produced[("events", -600_000)] == 24
    finally:
        mm.stop()
