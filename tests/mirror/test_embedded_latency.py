"""A mirror link's copy is visible offline as soon as it is appended, not at the next periodic flush: a default
broker's consumers see only flushed messages, so a caught-up copier flushes as an acks=all produce does (real
ZooKeeper, real brokers, the `ferry mirror link` command, confluent-kafka on both sides)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from mirror_harness import produce, wait_partitions

from ferry.zk.cluster_registry import ClusterRegistry

pytestmark = pytest.mark.slow

FLUSH_MS = 30_000  # the offline broker's periodic flush: far longer than the copy may take


def test_caught_up_copy_is_visible_before_the_periodic_flush(cluster_factory) -> None:
    live = cluster_factory(1, "live")
    offline = cluster_factory(1, "offline", extra_args=("--flush-ms", str(FLUSH_MS)))
    with ClusterRegistry(live.zk_connect) as reg:
        reg.create_topic("clicks", 1)
    wait_partitions(live.bootstrap, "clicks", 1)
    produce(live.bootstrap, "clicks", 1, 10)
    out = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "link", "create", "dc1", "--source-zookeeper",
                          live.zk_connect, "--include", "clicks", "--zookeeper", offline.zk_connect],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    wait_partitions(offline.bootstrap, "clicks", 1, timeout=60)
    consumer = Consumer({"bootstrap.servers": offline.bootstrap, "group.id": "latency", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 50})
    producer = Producer({"bootstrap.servers": live.bootstrap, "acks": "all", "linger.ms": 0})
    try:
        consumer.assign([TopicPartition("clicks", 0, 0)])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 10 and time.monotonic() < deadline:  # the backlog of 10, copied once the link starts
            msg = consumer.poll(0.2)
            seen += msg is not None and msg.error() is None
        assert seen == 10, f"the first 10 messages offline: {seen}"
        # three single messages into a caught-up link: each offline within 5 s, six times less than the flush
        # interval (without the copier's flush each would wait for it: all three in time by chance ~0.1%)
        for i in range(3):
            producer.produce("clicks", b"late %d" % i)
            assert producer.flush(10) == 0
            sent = time.monotonic()
            got = None
            while got is None and time.monotonic() - sent < 15:
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    got = msg.value()
            took = time.monotonic() - sent
            assert got == b"late %d" % i and took < 5.0, f"message {i} offline after {took:.1f} s: {got!r}"
    finally:
        consumer.close()
