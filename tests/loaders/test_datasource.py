"""``spark.read.format("ferry")`` reads exactly the requested ranges, split into several Spark partitions."""

from __future__ import annotations

import pytest

from tests.loaders.conftest import create_topic, past_hour, produce, spread

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_reads_exact_ranges_in_splits(spark, offline):
    from pyspark.sql import functions as F

    topic = create_topic(offline, partitions=2)
    t0 = past_hour(1)
    produce(offline, topic, spread(t0, 300), round_robin=2)  # 150 per partition
    df = (spark.read.format("ferry").option("kafka.bootstrap.servers", offline.bootstrap).option("subscribe", topic)
          .option("startingOffsets", f'{{"{topic}": {{"0": 10, "1": 0}}}}')
          .option("endingOffsets", f'{{"{topic}": {{"0": 95, "1": 40}}}}')
          .option("maxRecordsPerPartition", "20").load())
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "headers"]
    assert df.rdd.getNumPartitions() == 5 + 2  # ceil(85/20) + ceil(40/20)
    rows = df.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == (
        [(0, o) for o in range(10, 95)] + [(1, o) for o in range(0, 40)])
    one = df.where("partition = 1 AND offset = 0").collect()[0]
    assert one.topic == topic and one.value[0] == 0  # registry wire format: magic byte 0
    assert t0 <= int(one.timestamp.timestamp() * 1000) < t0 + 3_600_000
    assert {h.key for h in one.headers} == {"ferry.host"}

    everything = (spark.read.format("ferry").option("kafka.bootstrap.servers", offline.bootstrap)
                  .option("subscribe", topic).load())  # earliest .. latest
    assert everything.count() == 300
    assert everything.agg(F.countDistinct("partition", "offset")).collect()[0][0] == 300


@pytest.mark.parametrize("options, message", [
    ({}, "needs option kafka.bootstrap.servers"),
    ({"kafka.bootstrap.servers": "x:1", "startingOffsets": '{"t": {"0": 9}}', "endingOffsets": '{"t": {"0": 3}}'},
     "endingOffset 3 is before startingOffset 9"),
    ({"kafka.bootstrap.servers": "x:1", "startingOffsets": '{"t": {"0": 1}}', "endingOffsets": '{"t": {"1": 3}}'},
     "name different partitions"),
    ({"kafka.bootstrap.servers": "x:1", "startingOffsets": "earliest"}, "needs the subscribe option"),
])
def test_bad_options_fail_with_a_clear_message(spark, options, message):
    reader = spark.read.format("ferry")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=message):
        reader.load().collect()


def _oracle(bootstrap: str, topic: str, partition: int, start: int, end: int) -> list[tuple]:
    """What confluent-kafka (librdkafka) reads for the same range: the reference for every column."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "oracle", "enable.auto.commit": False})
    out: list[tuple] = []
    try:
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                assert m.error() is None, m.error()
                if m.offset() < end:
                    out.append((m.offset(), m.timestamp()[1] * 1000, m.key(), m.value(),
                                [(k, v) for k, v in (m.headers() or [])]))
    finally:
        c.close()
    return out


@pytest.mark.parametrize("topic_config", [{}, {"message.timestamp.type": "LogAppendTime"}])
def test_split_reader_returns_what_librdkafka_reads(offline, topic_config):
    """Every column of read_split against confluent-kafka's view of the same range: keys and values (also
    null), several headers, codecs mixed in one partition, the broker's timestamps under LogAppendTime."""
    import pyarrow as pa
    from confluent_kafka import Producer

    from ferry.loaders.datasource import OffsetSplit, read_split
    from ferry.zk import ClusterRegistry

    topic = f"rs-{len(topic_config)}"
    with ClusterRegistry(offline.zk) as reg:
        reg.create_topic(topic, 1, {k: str(v) for k, v in topic_config.items()} or None)
    for codec in ("none", "zstd", "gzip"):
        p = Producer({"bootstrap.servers": offline.bootstrap, "compression.type": codec, "linger.ms": 5})
        for i in range(200):
            p.produce(topic, partition=0, key=None if i % 5 == 0 else b"k%d" % i,
                      value=None if i % 50 == 7 else b"%s-%d" % (codec.encode(), i) * (1 + i % 3),
                      headers=[("a", b"1"), ("b", None if i % 2 else b"%d" % i)] if i % 4 else None,
                      timestamp=1_700_000_000_000 + i)
        assert p.flush(30) == 0
    want = _oracle(offline.bootstrap, topic, 0, 37, 561)
    batches = list(read_split(OffsetSplit(0, topic, 0, 37, 561), offline.bootstrap, 30, 100))
    assert len(batches) >= 5  # ~100 rows per Arrow batch
    table = pa.Table.from_batches(batches)
    got = [(r["offset"], int(r["timestamp"].timestamp() * 1_000_000), r["key"], r["value"],
            [(h["key"], h["value"]) for h in r["headers"]]) for r in table.to_pylist()]
    assert len(got) == 561 - 37 and got == want
    assert set(table.column("topic").to_pylist()) == {topic} and set(table.column("partition").to_pylist()) == {0}
    if topic_config:
        assert all(ts // 1000 > 1_700_000_001_000 for _, ts, *_ in got)  # the broker's clock, not the producer's


def test_split_reader_fails_clearly_on_missing_data(offline):
    from ferry.client.message_set_producer import MessageSetProducer
    from ferry.loaders.datasource import OffsetSplit, SplitReadError, read_split
    from ferry.zk import ClusterRegistry

    with ClusterRegistry(offline.zk) as reg:
        reg.create_topic("rs-short", 1)
    with MessageSetProducer(offline.bootstrap) as p:
        p.send_and_wait("rs-short", 0, [b"x"] * 10)
    with pytest.raises(SplitReadError, match=r"no progress at offset 10 for 1 s \(read 10 of 20\)"):
        list(read_split(OffsetSplit(0, "rs-short", 0, 0, 20), offline.bootstrap, 1.0, 100))
    with pytest.raises(SplitReadError, match="fetch failed"):  # past the log end: OFFSET_OUT_OF_RANGE
        list(read_split(OffsetSplit(0, "rs-short", 0, 50, 60), offline.bootstrap, 1.0, 100))
