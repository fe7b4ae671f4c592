"""A topic's compression.type, set through CreateTopics: the broker stores every producer's batches in the
topic's codec, and confluent-kafka, kafka-python and ferry's message-set consumer read them all back."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import WireClient, fetch, metadata, start_brokers  # noqa: E402
from kafka.record import MemoryRecords  # noqa: E402

from ferry.client.message_set_consumer import MessageSetConsumer  # noqa: E402
from ferry.client.message_set_producer import MessageSetProducer  # noqa: E402

N = 300


@pytest.fixture(scope="module")
def broker(zk_server, tmp_path_factory):
    _zk, brokers = start_brokers(zk_server.connect, tmp_path_factory.mktemp("topic-compression"), 1,
                                 extra_args=("--flush-ms", "20"))
    # A broker registers before it is elected controller; an AdminClient whose first Metadata names no
    # controller waits far longer than the test for another (librdkafka), so wait for the election here.
    deadline = time.monotonic() + 30
    with WireClient(brokers[0].bootstrap) as c:
        while metadata(c, [], version=1)["controller"] < 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    yield brokers[0]
    brokers[0].stop()


def create(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=config)],
                              operation_timeout=30)[topic]
    fut.result(timeout=60)  # generous: the first request of a fresh broker on a loaded machine


def stored(bootstrap: str, topic: str, count: int) -> tuple[bytes, list[int]]:
    """The partition's log as fetched once all ``count`` records are visible (flushed), and each batch's codec."""
    deadline = time.monotonic() + 20
    with WireClient(bootstrap) as c:
        while True:
            data = fetch(c, topic, 0, 0, max_wait_ms=200, max_bytes=8 << 20).records
            records = MemoryRecords(data)
            codecs, n = [], 0
            while (batch := records.next_batch()) is not None:
                assert batch.validate_crc()
                codecs.append(batch.compression_type)
                n += len(list(batch))
            if n >= count or time.monotonic() > deadline:
                assert n == count, f"{n} of {count} records visible"
                return data, codecs
            time.sleep(0.05)


@pytest.mark.parametrize("topic_codec,codec_id", [("zstd", 4), ("gzip", 1), ("lz4", 3), ("snappy", 2),
                                                  ("uncompressed", 0)])
def test_every_producer_stored_in_the_topic_codec_and_every_consumer_reads_it(broker, topic_codec, codec_id):
    topic = f"tc-{topic_codec}"
    create(broker.bootstrap, topic, {"compression.type": topic_codec})
    values = [b"event %04d " % i + b"page-view member=12345 " * 6 for i in range(N)]

    # librdkafka, uncompressed, and kafka-python compressing with another codec (idempotent: sequences kept)
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "none", "linger.ms": 5})
    for v in values[:100]:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4" if topic_codec != "lz4" else "gzip",
                       linger_ms=5)
    try:
        for v in values[100:200]:
            kp.send(topic, value=v, partition=0)
        kp.flush(timeout=30)
    finally:
        kp.close(timeout=10)
    with MessageSetProducer(broker.bootstrap) as mp:  # ferry's message sets, uncompressed
        mp.send(topic, 0, values[200:250])
        mp.send(topic, 0, values[250:])
        mp.flush()

    _, codecs = stored(broker.bootstrap, topic, N)
    assert codecs and set(codecs) == {codec_id}, codecs

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            for m in c.consume(num_messages=500, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        c.close()
    assert got == values

    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None,
                       auto_offset_reset="earliest", fetch_max_wait_ms=200)
    got = []
    try:
        kc.assign([KpTopicPartition(topic, 0)])
        kc.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            for records in kc.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
    finally:
        kc.close()
    assert got == values

    with MessageSetConsumer(broker.bootstrap, topic, 0, stop_at_end=True) as ms:
        assert [r.value for r in ms] == values


def test_compression_saves_disk_for_uncompressed_producers(broker, tmp_path):
    """What the setting is for: the same uncompressed sends take a fraction of the disk."""
    sizes = {}
    for codec in ("producer", "zstd"):
        topic = f"disk-{codec}"
        create(broker.bootstrap, topic, {"compression.type": codec})
        with MessageSetProducer(broker.bootstrap) as mp:
            for i in range(40):
                mp.send(topic, 0, [b'{"event":"page_view","member":%d,"page":"/feed"}' % (i * 50 + j) for j in range(50)])
            mp.flush()
        sizes[codec] = len(stored(broker.bootstrap, topic, 2000)[0])
    assert sizes["zstd"] < sizes["producer"] / 3, sizes


def test_bad_compression_type_is_refused_at_create(broker):
    with pytest.raises(KafkaException) as e:
        create(broker.bootstrap, "tc-bad", {"compression.type": "brotli"})
    assert "compression.type" in str(e.value) and "brotli" in str(e.value)
