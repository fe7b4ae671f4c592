"""``spark.read.format("ferry")``: a PySpark Python data source reading exact offset ranges.

Options follow Spark's Kafka source so that a job written for one reads like the other:

- ``kafka.bootstrap.servers`` (required): the brokers' listeners of the client settings' security.protocol;
  other ``kafka.*`` options are accepted and ignored (the reader is not librdkafka)
- ``ferry.clientConfig`` / ``ferry.clientConfigShipped``: where the TLS/SASL client properties file is (a path
  in local mode, a SparkFiles name in cluster mode: client_file.py); never the settings themselves
- ``subscribe``: comma-separated topics (needed when the offsets are ``earliest``/``latest``)
- ``startingOffsets``: ``earliest`` or JSON ``{"topic": {"0": 42}}`` (inclusive)
- ``endingOffsets``: ``latest`` or JSON (exclusive)
- ``maxRecordsPerPartition``: split a partition's range into Spark partitions of at most this many offsets
- ``ferry.idleTimeoutMs`` (60000): fail a split that makes no progress for this long
- ``ferry.batchRows`` (20000): rows per Arrow batch handed to Spark
- ``ferry.fetchBytes`` (4 MiB): bytes asked for per Fetch request
- ``ferry.load`` (the load job's, JSON of split_load.SplitTarget): instead of the records, each split
  decodes its values and writes them as Parquet into the hour partitions' new version directories, and
  the DataFrame holds per-split statistics (split_load.STATS_SCHEMA): rows never enter the JVM

Columns: ``key, value, topic, partition, offset, timestamp, headers`` (as Spark's Kafka source, minus
``timestampType``). The driver only plans; each split is read on an executor by its own MessageSetConsumer
(pipelined Fetch, every batch's CRC-32C checked; records parsed natively into Arrow columns, see
record_columns.py), from the start offset to the end offset. Batches are ``pyarrow.RecordBatch`` (the fastest way through the Python data source API).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from ferry.client.errors import ClientError
from ferry.client.message_set_consumer import MessageSetConsumer
from ferry.loaders.client_file import executor_client_config
from ferry.loaders.cluster_offsets import ClusterOffsets
from ferry.loaders.offsets import (
    OffsetRange,
    OffsetSpecError,
    parse_offsets_json,
    ranges_from_offsets,
    split_ranges,
)
from ferry.loaders.record_columns import SplitRecords
from ferry.loaders.split_load import STATS_SCHEMA, SplitTarget, load_split
from ferry.wire.client_config import ClientConfig

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "headers array<struct<key:string,value:binary>>")

FETCH_BYTES = 4 << 20  # per Fetch request of a split's reader (the paper's consumer pulled 200 KB)


class OffsetSplit(InputPartition):
    """One Spark input partition: ``[start, end)`` of one topic partition."""

    def __init__(self, index: int, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__(index)
        self.index, self.topic, self.partition, self.start, self.end = index, topic, partition, start, end

    def __repr__(self) -> str:
        return f"OffsetSplit({self.topic}/{self.partition} [{self.start},{self.end}))"


class FerryDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "ferry"

    def schema(self) -> str:
        return STATS_SCHEMA if any(k.lower() == "ferry.load" for k in self.options) else SCHEMA

    def reader(self, schema: StructType) -> FerryReader:
        return FerryReader(dict(self.options))


class FerryReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        opts = {k.lower(): v for k, v in options.items()}
        self.bootstrap = opts.get("kafka.bootstrap.servers")
        if not self.bootstrap:
            raise ValueError("format('ferry') needs option kafka.bootstrap.servers")
        self.subscribe = [t.strip() for t in opts.get("subscribe", "").split(",") if t.strip()]
        self.starting = opts.get("startingoffsets", "earliest")
        self.ending = opts.get("endingoffsets", "latest")
        self.max_per_split = int(opts.get("maxrecordsperpartition", "0") or 0)
        self.idle_timeout_s = int(opts.get("ferry.idletimeoutms", "60000")) / 1000.0
        self.batch_rows = max(1, int(opts.get("ferry.batchrows", "20000")))
        self.fetch_bytes = max(1024, int(opts.get("ferry.fetchbytes", str(FETCH_BYTES))))
        self.load = opts.get("ferry.load")  # a split_load.SplitTarget as JSON: decode and write Parquet
        # where the client settings are (read where they are used: the secret never rides in the pickled reader)
        self.client_options = {k: v for k, v in opts.items() if k.startswith("ferry.clientconfig")}

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
        out: dict[tuple[str, int], int] = {}
        with ClusterOffsets(bootstrap=self.bootstrap, client_config=executor_client_config(self.client_options)) as cluster:
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
    def read(self, partition: OffsetSplit) -> Iterator[pa.RecordBatch]:
        if not self.load:
            yield from self.records(partition)
            return
        timing: dict[str, float] = {}
        records = self.records(partition, keys=False, headers=False, timing=timing)
        yield from load_split(records, partition.index, partition.topic, SplitTarget.from_json(self.load), timing)

    def records(self, partition: OffsetSplit, keys: bool = True, headers: bool = True,
                timing: dict[str, float] | None = None) -> Iterator[pa.RecordBatch]:
        """The split's records as Arrow batches with the source's columns (what ``read`` yields without
        ``ferry.load``)."""
        yield from read_split(partition, self.bootstrap, self.idle_timeout_s, self.batch_rows, self.fetch_bytes,
                              keys=keys, headers=headers, timing=timing,
                              client_config=executor_client_config(self.client_options))


class SplitReadError(RuntimeError):
    """A split could not be read completely (data deleted meanwhile, broker gone, timeout)."""


def read_split(split: OffsetSplit, bootstrap: str, idle_timeout_s: float, batch_rows: int,
               fetch_bytes: int = FETCH_BYTES, *, keys: bool = True, headers: bool = True,
               timing: dict[str, float] | None = None,
               client_config: ClientConfig | None = None) -> Iterator[pa.RecordBatch]:
    """Yield RecordBatches (at most ``batch_rows`` rows each) with exactly the offsets ``[split.start,
    split.end)`` that exist in the log.

    The split is read with ferry's MessageSetConsumer (pipelined Fetch, CRC-32C of every batch checked,
    read_committed: aborted transactions' records are never loaded; split ends are last stable offsets) and
    its records are taken into Arrow columns a message set at a time (record_columns.SplitRecords: native,
    no Python object per record). ``keys``/``headers`` False leaves those columns empty (the load needs
    neither). ``timing`` (if given) gets the seconds spent parsing records under ``"parse"``. ``client_config``:
    TLS/SASL towards the brokers.
    """
    if split.end <= split.start:
        return
    topic, part, start, end = split.topic, split.partition, split.start, split.end
    records = SplitRecords(topic, part, start, end, keys=keys, headers=headers)

    def chunks() -> Iterator[pa.RecordBatch]:
        batch = records.take()
        for at in range(0, batch.num_rows, batch_rows):
            yield batch.slice(at, batch_rows)

    try:
        with MessageSetConsumer(bootstrap, topic, part, start, max_bytes=fetch_bytes, max_wait_ms=100,
                                idle_timeout_s=idle_timeout_s, client_id="ferry-load",
                                read_committed=True, client_config=client_config) as consumer:
            for message_set in consumer.message_sets():
                records.add(message_set.data)
                if records.count >= batch_rows:
                    yield from chunks()
                if consumer.position >= end:
                    break
            else:  # the consumer stopped: no new records for idle_timeout_s
                raise SplitReadError(f"{split}: no progress at offset {consumer.position} for {idle_timeout_s:g} s "
                                     f"(read {consumer.position - start} of {end - start})")
    except ClientError as e:
        raise SplitReadError(f"{split}: fetch failed: {e}") from e
    if records.count:
        yield from chunks()
    if timing is not None:
        timing["parse"] = records.seconds


_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def register(spark: SparkSession) -> None:
    """Make ``format("ferry")`` available in this session (once: re-registering logs a warning)."""
    if spark in _registered:
        return
    spark.dataSource.register(FerryDataSource)
    _registered.add(spark)
