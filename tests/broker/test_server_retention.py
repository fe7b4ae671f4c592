"""Retention in a running broker: old segments go, the log start moves, a fetch below it is out of range."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from ferry.zk import ClusterRegistry


def test_time_retention_deletes_segments_and_moves_the_log_start(cluster_factory) -> None:
    cluster = cluster_factory(1, extra_args=("--retention-ms", "1500", "--retention-check-interval-ms", "300",
                                             "--log-segment-bytes", "20000", "--flush-ms", "50"))
    with ClusterRegistry(cluster.zk_connect) as reg:
        reg.create_topic("old", 1)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i in range(500):
        p.produce("old", b"x" * 200, key=str(i).encode())
        if i % 50 == 0:
            p.flush(10)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "r", "enable.auto.commit": False,
                  "auto.offset.reset": "error"})
    try:
        deadline = time.monotonic() + 30
        low = high = 0
        while time.monotonic() < deadline:
            low, high = c.get_watermark_offsets(TopicPartition("old", 0), timeout=5)
            if low > 0:
                break
            time.sleep(0.3)
        assert high == 500 and 0 < low <= 500, (low, high)
        # the active segment is never deleted, so the newest data is still there
        segments = sorted((next(iter(cluster.brokers.values())).data_dir / "old-0").glob("*.log"))
        assert segments and int(segments[0].stem) == low
        c.assign([TopicPartition("old", 0, 0)])
        err = None
        end = time.monotonic() + 15
        while err is None and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and m.error() is not None:
                err = m.error()
        # librdkafka reports the broker's OFFSET_OUT_OF_RANGE as _AUTO_OFFSET_RESET with policy "error"
        assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET, err
        assert "Offset out of range" in err.str()
    finally:
        c.close()
