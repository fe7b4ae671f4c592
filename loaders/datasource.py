"""``spark.read.format("ferry")``: a PySpark Python data source reading exact offset ranges.

Options follow Spark's Kafka source so that a job written for one reads like the other:

- ``kafka.bootstrap.servers`` (required); other ``kafka.*`` options go to librdkafka unchanged
- ``subscribe``: comma-separated topics (needed when the offsets are ``earliest``/``latest``)
- ``startingOffsets``: ``earliest`` or JSON ``{"topic": {"0": 42}}`` (inclusive)
- ``endingOffsets``: ``latest`` or JSON (exclusive)
- ``maxRecordsPerPartition``: split a partition's range into Spark partitions of at most this many offsets
- ``ferry.idleTimeoutMs`` (60000): fail a split that makes no progress for this long
- ``ferry.batchRows`` (20000): rows per Arrow batch handed to Spark

Columns: ``key, value, topic, partition, offset, timestamp, headers`` (as Spark's Kafka source, minus
``timestampType``). The driver only plans; each split is read on an executor by its own librdkafka consumer,
assigned at the start offset, stopping at the end offset. Batches are ``pyarrow.RecordBatch`` (the fastest
way through the Python data source API).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from loaders.offsets import (
    OffsetRange,
    OffsetSpecError,
    parse_offsets_json,
    ranges_from_offsets,
    split_ranges,
)

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "headers array<struct<key:string,value:binary>>")

# Fault injection for tests of the commit protocol: every split raises after reading this many records.
FAIL_AFTER_OPTION = "ferry.test.failAfterRecords"


class OffsetSplit(InputPartition):
    """One Spark input partition: ``[start, end)`` of one topic partition."""

    def __init__(self, index: int, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__(index)
        self.index, self.topic, self.partition, self.start, self.end = index, topic, partition, start, end

    def __repr__(self) -> str:
        return f"OffsetSplit({self.topic}/{self.partition} [{self.start},{self.end}))"


def _arrow_schema():
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                      ("partition", pa.int32()), ("offset", pa.int64()),
                      ("timestamp", pa.timestamp("us", tz="UTC")),
                      ("headers", pa.list_(pa.field("element", header)))])


class FerryDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "ferry"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> FerryReader:
        return FerryReader(dict(self.options))


class FerryReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        opts = {k.lower(): v for k, v in options.items()}
        self.bootstrap = opts.get("kafka.bootstrap.servers")
        if not self.bootstrap:
            raise ValueError("format('ferry') needs option kafka.bootstrap.servers")
        self.kafka_conf = {k[len("kafka."):]: v for k, v in opts.items()
                           if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}
        self.subscribe = [t.strip() for t in opts.get("subscribe", "").split(",") if t.strip()]
        self.starting = opts.get("startingoffsets", "earliest")
        self.ending = opts.get("endingoffsets", "latest")
        self.max_per_split = int(opts.get("maxrecordsperpartition", "0") or 0)
        self.idle_timeout_s = int(opts.get("ferry.idletimeoutms", "60000")) / 1000.0
        self.batch_rows = max(1, int(opts.get("ferry.batchrows", "20000")))
        self.fail_after = int(opts.get(FAIL_AFTER_OPTION.lower(), "0") or 0)

    # ---- driver side
    def _resolve(self, spec: str, which: str) -> dict[tuple[str, int], int]:
        spec = spec.strip()
        if spec.startswith("{"):
            offsets = parse_offsets_json(spec, which)
            if self.subscribe:
                stray = sorted({t for t, _ in offsets} - set(self.subscribe))
                if stray:
                    raise OffsetSpecError(f"{which} names topics not in subscribe: {', '.join(stray)}")
            return offsets
        if spec not in ("earliest", "latest"):
            raise OffsetSpecError(f"{which} must be earliest, latest or JSON, not {spec!r}")
        if not self.subscribe:
            raise OffsetSpecError(f"{which}={spec} needs the subscribe option (which topics?)")
        from loaders.cluster_offsets import ClusterOffsets

        out: dict[tuple[str, int], int] = {}
        with ClusterOffsets(bootstrap=self.bootstrap) as cluster:
            counts = cluster.topics()
            for topic in self.subscribe:
                if topic not in counts:
                    raise OffsetSpecError(f"unknown topic {topic!r}")
                for p in range(counts[topic]):
                    wm = cluster.watermarks(topic, p)
                    out[(topic, p)] = wm.low if spec == "earliest" else wm.high
        return out

    def ranges(self) -> list[OffsetRange]:
        starting = self._resolve(self.starting, "startingOffsets")
        ending = self._resolve(self.ending, "endingOffsets")
        if self.starting.strip().startswith("{") and not self.ending.strip().startswith("{"):
            ending = {k: v for k, v in ending.items() if k in starting}
        if self.ending.strip().startswith("{") and not self.starting.strip().startswith("{"):
            starting = {k: v for k, v in starting.items() if k in ending}
        return ranges_from_offsets(starting, ending)

    def partitions(self) -> list[OffsetSplit]:
        splits = split_ranges(self.ranges(), self.max_per_split)
        return [OffsetSplit(i, r.topic, r.partition, r.start, r.end) for i, r in enumerate(splits)]

    # ---- executor side
    def read(self, partition: OffsetSplit) -> Iterator:
        yield from read_split(partition, self.bootstrap, self.kafka_conf, self.idle_timeout_s, self.batch_rows,
                              self.fail_after)


class SplitReadError(RuntimeError):
    """A split could not be read completely (data deleted meanwhile, broker gone, timeout)."""


def read_split(split: OffsetSplit, bootstrap: str, kafka_conf: dict[str, str], idle_timeout_s: float,
               batch_rows: int, fail_after: int = 0) -> Iterator:
    """Yield RecordBatches with exactly the offsets ``[split.start, split.end)`` that exist in the log."""
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from loaders.cluster_offsets import consumer_config

    if split.end <= split.start:
        return
    schema = _arrow_schema()
    header_type = schema.field("headers").type
    conf = consumer_config(bootstrap, **{"enable.partition.eof": True, "fetch.wait.max.ms": 100,
                                         "queued.min.messages": max(batch_rows, 10_000)})
    conf.update(kafka_conf)
    consumer = Consumer(conf)
    topic, part, end = split.topic, split.partition, split.end
    try:
        consumer.assign([TopicPartition(topic, part, split.start)])
        next_offset = split.start
        produced = 0
        keys: list = []
        values: list = []
        offsets: list[int] = []
        stamps: list = []
        headers: list = []
        last_progress = time.monotonic()

        def flush():
            n = len(offsets)
            batch = pa.RecordBatch.from_arrays([
                pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                pa.array([topic] * n, pa.string()), pa.array([part] * n, pa.int32()),
                pa.array(offsets, pa.int64()), pa.array(stamps, pa.timestamp("us", tz="UTC")),
                pa.array(headers, header_type)], schema=schema)
            keys.clear(), values.clear(), offsets.clear(), stamps.clear(), headers.clear()
            return batch

        add_key, add_value, add_offset = keys.append, values.append, offsets.append
        add_stamp, add_headers = stamps.append, headers.append
        partition_eof = KafkaError._PARTITION_EOF
        while next_offset < end:
            msgs = consumer.consume(num_messages=min(batch_rows, 10_000), timeout=0.5)
            if not msgs:
                if time.monotonic() - last_progress > idle_timeout_s:
                    raise SplitReadError(f"{split}: no progress at offset {next_offset} for {idle_timeout_s:g} s "
                                         f"(read {next_offset - split.start} of {end - split.start})")
                continue
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == partition_eof:
                        continue
                    raise SplitReadError(f"{split}: fetch failed at offset {next_offset}: {err}")
                off = m.offset()
                if off < next_offset:
                    continue
                if off >= end:
                    next_offset = end
                    break
                add_key(m.key())
                add_value(m.value())
                add_offset(off)
                ts_type, ts = m.timestamp()
                add_stamp(ts * 1000 if ts_type and ts >= 0 else None)
                add_headers(m.headers() or [])  # [(key, value)]: Arrow builds the structs from tuples
                next_offset = off + 1
                produced += 1
                if fail_after and produced >= fail_after:
                    raise SplitReadError(f"{split}: injected failure after {produced} records ({FAIL_AFTER_OPTION})")
            last_progress = time.monotonic()
            if len(offsets) >= batch_rows:
                yield flush()
        if offsets:
            yield flush()
    finally:
        consumer.close()


def register(spark) -> None:
    """Make ``format("ferry")`` available in this session (once: re-registering logs a warning)."""
    if getattr(spark, "_ferry_registered", False):
        return
    spark.dataSource.register(FerryDataSource)
    spark._ferry_registered = True
