"""confluent-kafka (librdkafka) produces and consumes through ferry brokers with every codec, across two
brokers and several partitions: every message comes back, in order per partition, at its acknowledged offset."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import WireClient, fetch, leaders, start_brokers  # noqa: E402
from kafka.record import MemoryRecords  # noqa: E402

PARTITIONS = 4
PER_PARTITION = 250
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    _zk, brokers = start_brokers(zk_server.connect, tmp_path_factory.mktemp("confluent"), 2,
                                 extra_args=("--flush-ms", "20"))
    yield brokers
    for b in brokers:
        b.stop()


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)],
                                  operation_timeout=10)
    futures[topic].result(timeout=20)


@pytest.mark.parametrize("codec", list(CODEC_IDS))
def test_confluent_produce_and_consume(cluster, codec):
    b1, b2 = cluster
    topic = f"ck-{codec}"
    _create(b1.bootstrap, topic)  # CreateTopics through librdkafka's admin client
    with WireClient(b1.bootstrap) as c:
        lead = leaders(c, topic, PARTITIONS)
    assert set(lead.values()) == {1, 2}

    # bootstrapped at broker 1 only: the producer learns broker 2's partitions from Metadata
    producer = Producer({"bootstrap.servers": b1.bootstrap, "compression.type": codec, "linger.ms": 20,
                         "batch.num.messages": 100})
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    errors: list = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[msg.partition()].append((msg.offset(), msg.value()))

    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            value = b"%s-%d-%d-" % (codec.encode(), p, i) + b"x" * (i % 97)
            sent[p].append(value)
            producer.produce(topic, value=value, key=b"k%d" % i, partition=p, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    for p in range(PARTITIONS):
        assert [v for _o, v in acked[p]] == sent[p]
        assert [o for o, _v in acked[p]] == list(range(PER_PARTITION))

    # the batches on the broker really are compressed with the codec asked for
    by_id = {b.broker_id: b.bootstrap for b in cluster}
    with WireClient(by_id[lead[0]]) as c:
        f = fetch(c, topic, 0, 0, max_wait_ms=2000)
        records = MemoryRecords(f.records)
        codecs = set()
        while (batch := records.next_batch()) is not None:
            codecs.add(batch.compression_type)
        # librdkafka sends a batch uncompressed when compressing would not make it smaller (a lone small
        # message can end up alone in a batch): every batch is either the codec asked for or plain
        assert CODEC_IDS[codec] in codecs and codecs <= {0, CODEC_IDS[codec]}, codecs

    # bootstrapped at broker 2 only
    consumer = Consumer({"bootstrap.servers": b2.bootstrap, "group.id": f"g-{codec}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        total = PARTITIONS * PER_PARTITION
        deadline = time.monotonic() + 30
        n = 0
        while n < total and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append((msg.offset(), msg.value()))
                n += 1
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        assert got[p] == acked[p], f"partition {p}: {len(got[p])} of {len(acked[p])}"


def test_log_append_time_topic(cluster):
    """A topic created with message.timestamp.type=LogAppendTime: the producer's delivery report and the
    consumer both carry the broker's time, whatever timestamp the producer set."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    topic = "append-time"
    admin = AdminClient({"bootstrap.servers": cluster[0].bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                            config={"message.timestamp.type": "LogAppendTime"})],
                                  operation_timeout=10)
    futures[topic].result(timeout=20)
    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": cluster[0].bootstrap, "linger.ms": 5})
    reports: list = []
    for i in range(20):
        producer.produce(topic, value=b"t%d" % i, timestamp=1_000 + i, partition=0,
                         on_delivery=lambda err, msg: reports.append((err, msg.timestamp())))
    assert producer.flush(30) == 0
    after = int(time.time() * 1000)
    assert all(err is None for err, _ in reports) and len(reports) == 20
    assert all(kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after for _, (kind, ts) in reports), reports
    consumer = Consumer({"bootstrap.servers": cluster[0].bootstrap, "group.id": "append-time",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got.extend(m for m in consumer.consume(num_messages=20, timeout=0.5) if m.error() is None)
    finally:
        consumer.close()
    assert [m.value() for m in got] == [b"t%d" % i for i in range(20)]
    assert all(m.timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME and before <= m.timestamp()[1] <= after for m in got)
