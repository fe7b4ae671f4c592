"""The audited Producer against real brokers: delivery, headers, event time, partitioning, codecs,
and audit counts read back from `_audit` equal to what was delivered."""

from __future__ import annotations

import time

import pytest

from ferry.audit.reader import read_audit_events
from ferry.audit.reconciler import reconcile
from ferry.client.audit.bucket import BUCKET_MS, bucket_start
from ferry.client.producer import HOST_HEADER, Producer
from ferry.client.simple_consumer import SimpleConsumer
from tests.client.conftest import create_topic
from tests.client.group_helpers import wait_until


def test_100k_messages_audit_counts_equal_the_delivered(live):
    create_topic(live.zk_connect, "page-views", 4)
    now = int(time.time() * 1000)
    # event times spread over three buckets: the audit must count per bucket of *event* time
    buckets = [bucket_start(now) - k * BUCKET_MS for k in range(3)]
    n = 100_000
    expected = {b: 0 for b in buckets}
    producer = Producer(zookeeper=live.zk_connect, application="test-app", audit_interval_s=1.0)
    value = b"v" * 200
    t0 = time.perf_counter()
    for i in range(n):
        ts = buckets[i % 3] + 1000 + i % 500
        producer.send("page-views", value, timestamp_ms=ts)
        expected[buckets[i % 3]] += 1
    assert producer.flush(60) == 0
    elapsed = time.perf_counter() - t0
    assert producer.close() == 0
    assert producer.delivered == n and producer.failed == 0

    with SimpleConsumer(zookeeper=live.zk_connect) as c:
        stored = sum(c.watermarks("page-views", p)[1] for p in c.partitions("page-views"))
    assert stored == n  # idempotent, acks=all: exactly once in the log

    audit_log = read_audit_events(live.zk_connect)
    assert audit_log.invalid == 0
    events = [e for e in audit_log.events if e.topic == "page-views"]
    assert {e.tier for e in events} == {"producer"}
    assert {e.application for e in events} == {"test-app"}
    assert {e.datacenter for e in events} == {"live"}  # taken from the brokers' registrations
    assert not any(e.topic == "_audit" for e in audit_log.events)  # `_audit` itself is not audited
    per_bucket: dict[int, int] = {}
    for e in events:
        per_bucket[e.bucket_start] = per_bucket.get(e.bucket_start, 0) + e.count
    assert per_bucket == expected
    report = reconcile(audit_log.events, topic="page-views")
    assert sum(h.produced for h in report.hours) == n
    print(f"\n100k x 200 B with delivery: {n / elapsed:,.0f} msg/s")


def test_every_message_carries_event_time_and_host_and_key_partitioning_is_stable(live):
    create_topic(live.zk_connect, "clicks", 3)
    with Producer(live.bootstrap, application="t", partitioner="key", compression="zstd") as producer:
        for i in range(30):
            producer.send("clicks", f"v{i}".encode(), f"user-{i % 5}".encode(), timestamp_ms=1_700_000_000_000 + i,
                          headers={"trace": b"abc"})
        assert producer.flush(30) == 0
    with SimpleConsumer(live.bootstrap) as c:
        msgs = list(c.read("clicks"))
    assert len(msgs) == 30
    partitions_of_key: dict[bytes, set[int]] = {}
    for m in msgs:
        i = int(m.value[1:])
        assert m.timestamp == 1_700_000_000_000 + i
        headers = dict(m.headers)
        assert headers[HOST_HEADER] and headers["trace"] == b"abc"
        partitions_of_key.setdefault(m.key, set()).add(m.partition)
    assert all(len(ps) == 1 for ps in partitions_of_key.values())


def test_every_codec_round_trips(live):
    values = [f"message {i} ".encode() * 10 for i in range(500)]
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        topic = f"codec-{codec}"
        create_topic(live.zk_connect, topic, 1)
        with Producer(live.bootstrap, compression=codec, acks="1", enable_idempotence=False, audit=False) as p:
            assert p.send_message_set(topic, values) == 500
            assert p.flush(30) == 0
        with SimpleConsumer(live.bootstrap) as c:
            # acks=1: consumers see messages once the broker flushed them (its flush interval is short)
            wait_until(lambda c=c, topic=topic: c.watermarks(topic, 0)[1] == 500, timeout=10, what="flushed")
            assert [m.value for m in c.read(topic)] == values, codec


def test_audit_counts_are_published_periodically_not_only_on_close(live):
    create_topic(live.zk_connect, "periodic", 1)
    producer = Producer(live.bootstrap, audit_interval_s=0.5)
    try:
        for _ in range(10):
            producer.send("periodic", b"x")
        assert producer.flush(10) == 0

        def published() -> int:
            return sum(e.count for e in read_audit_events(bootstrap=live.bootstrap).events if e.topic == "periodic")
        wait_until(lambda: published() == 10, timeout=10, what="periodic audit event")
    finally:
        producer.close()
    assert published() == 10  # nothing more to publish on close: no empty events


def test_a_failed_delivery_is_not_counted(live):
    # no such topic (and brokers do not auto-create): every delivery fails after the delivery timeout
    errors = []
    producer = Producer(live.bootstrap, delivery_timeout_ms=1500, audit_interval_s=0.5)
    for _ in range(10):
        producer.send("no-such-topic", b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    producer.close(10)
    assert len(errors) == 10 and all(e is not None for e in errors)
    assert producer.delivered == 0 and producer.failed == 10
    assert [e for e in read_audit_events(bootstrap=live.bootstrap).events if e.topic == "no-such-topic"] == []


def test_bad_settings_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="acks"):
        Producer("127.0.0.1:1", acks="2")
    with pytest.raises(ValueError, match="idempotent"):
        Producer("127.0.0.1:1", acks="1")
    with pytest.raises(ValueError, match="compression"):
        Producer("127.0.0.1:1", compression="brotli")
    with pytest.raises(ValueError, match="bootstrap"):
        Producer()


def test_without_an_audit_topic_counts_are_kept_and_close_does_not_hang(cluster_factory):
    cluster = cluster_factory(n_brokers=1)
    create_topic(cluster.zk_connect, "lonely", 1)
    producer = Producer(cluster.bootstrap, audit_interval_s=0.3)
    for _ in range(5):
        producer.send("lonely", b"x")
    assert producer.flush(10) == 0
    time.sleep(0.5)  # a periodic publish finds no `_audit` and keeps the counts
    t0 = time.monotonic()
    assert producer.close(20) == 0
    assert time.monotonic() - t0 < 10
    assert producer.counter.pending() == 5 and producer.delivered == 5
