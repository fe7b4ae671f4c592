"""``spark.read.format("ferry")`` reads exactly the requested ranges, split into several Spark partitions."""

from __future__ import annotations

import pytest

from tests.loaders.conftest import create_topic, past_hour, produce, spread

pytestmark = [pytest.mark.spark]


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
