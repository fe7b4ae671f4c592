"""kafka-python (pure Python; idempotent producer by default, so InitProducerId and sequence numbers are in
play) produces and consumes through ferry brokers with every codec, across two brokers and several
partitions."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import WireClient, create_topic, leaders, start_brokers  # noqa: E402

PARTITIONS = 4
PER_PARTITION = 200
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    _zk, brokers = start_brokers(zk_server.connect, tmp_path_factory.mktemp("kafkapython"), 2,
                                 extra_args=("--flush-ms", "20"))
    yield brokers
    for b in brokers:
        b.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produce_and_consume(cluster, codec):
    b1, b2 = cluster
    topic = f"kp-{codec}"
    with WireClient(b2.bootstrap) as c:
        assert create_topic(c, topic, PARTITIONS)[0] == 0
        lead = leaders(c, topic, PARTITIONS)
    assert set(lead.values()) == {1, 2}

    producer = KafkaProducer(bootstrap_servers=b1.bootstrap,
                             compression_type=None if codec == "none" else codec, linger_ms=10)
    assert producer.config["enable_idempotence"]
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    futures = []
    try:
        for i in range(PER_PARTITION):
            for p in range(PARTITIONS):
                value = b"%s-%d-%d-" % (codec.encode(), p, i) + b"y" * (i % 61)
                sent[p].append(value)
                futures.append((p, value, producer.send(topic, value=value, partition=p)))
        producer.flush(timeout=30)
        acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        for p, value, fut in futures:
            md = fut.get(timeout=10)
            assert md.partition == p
            acked[p].append((md.offset, value))
    finally:
        producer.close(timeout=10)
    for p in range(PARTITIONS):
        assert sorted(acked[p]) == [(i, v) for i, v in enumerate(sent[p])]

    consumer = KafkaConsumer(bootstrap_servers=b2.bootstrap, enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", fetch_max_wait_ms=200)
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        total = PARTITIONS * PER_PARTITION
        n = 0
        deadline = time.monotonic() + 30
        while n < total and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                for rec in records:
                    got[tp.partition].append((rec.offset, rec.value))
                    n += 1
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        assert got[p] == sorted(acked[p]), f"partition {p}: {len(got[p])} of {len(acked[p])}"
