"""One topic of a load run: its ranges -> a new version of every hour partition its rows fall into.

Two ways to write, same table contents (tests/loaders/test_columnar.py loads one fixture both ways):

- ``arrow`` (default for a local warehouse): the ``ferry`` source decodes and writes Parquet on the
  executors (split_load.py); Spark only schedules the splits and collects a few rows of statistics.
  Columns come from the schema ids the splits saw: the driver evolves the table after the write, and a
  run that fails (bad records, an incompatible schema) removes what it wrote before raising.
- ``spark`` (any Hadoop URI: hdfs://, s3a://): the records go through the JVM, are decoded by
  ``mapInArrow`` (the same columnar decoder) and written by Spark's Parquet writer. Slower: every row
  is converted between Arrow and Spark rows twice and written row by row.

Either way the hour partitions' versions are only written here; the job commits them (ledger) and
points the metastore at them afterwards.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

from pyspark import StorageLevel
from pyspark.sql import DataFrameReader, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from ferry.loaders.avro_columns import avro_columns, merge_columns
from ferry.loaders.catalog import PartitionVersion
from ferry.loaders.decoder import make_decoder
from ferry.loaders.load_config import BadRecordsError, Say, TopicResult
from ferry.loaders.offsets import OffsetRange, split_ranges
from ferry.loaders.planner import LoadPlan
from ferry.loaders.progress import LoadProgress
from ferry.loaders.split_load import SharedStorageError, SplitTarget, TopicTarget, rows_written
from ferry.loaders.warehouse import Warehouse, hours_filter, ranges_filter
from ferry.schemas.errors import SchemaError, UnknownSchemaError
from ferry.schemas.registry import SchemaRegistry, subject_for_topic

AUDIT_TYPES = {"guid": "string", "topic": "string", "tier": "string", "bucket_start": "long", "bucket_end": "long",
               "count": "long", "host": "string", "datacenter": "string", "application": "string", "time": "long"}

Source = Callable[[list[OffsetRange], str], DataFrameReader]  # LoadJob.source: where the records come from
TopicOutcome = tuple[TopicResult, list[PartitionVersion], dict[tuple[str, int], int]]  # result, versions, audit


class TopicSchemas:
    """The writer schemas a run's topics need, through one read-only registry session opened on first use
    (a run of `_audit` alone needs none)."""

    def __init__(self, zookeeper: str) -> None:
        self.zookeeper = zookeeper
        self._registry: SchemaRegistry | None = None

    def _open(self) -> SchemaRegistry:
        if self._registry is None:
            self._registry = SchemaRegistry(self.zookeeper, read_only=True)
        return self._registry

    def of_topic(self, topic: str) -> dict[int, dict]:
        """Writer schemas registered under the topic's subject (the ids its records normally carry)."""
        registry = self._open()
        out: dict[int, dict] = {}
        subject = subject_for_topic(topic)
        try:
            versions = registry.versions(subject)
        except SchemaError:  # no version under that subject (or a topic name that is no subject)
            return out
        for v in versions:
            sv = registry.version(subject, v)
            out[sv.id] = sv.schema
        return out

    def get(self, sid: int) -> dict | None:
        """The schema of ``sid``, or None when the registry does not know it."""
        try:
            return self._open().get(sid)
        except UnknownSchemaError:
            return None

    def close(self) -> None:
        if self._registry is not None:
            self._registry.close()
            self._registry = None


class TopicLoad:
    """One topic of a run: its table's columns, its bad records, its audit counts net of re-loaded rows, and
    the versions of the hours its rows fall into."""

    def __init__(self, run_id: str, topic: str, table: str, ranges: list[OffsetRange], *, spark: SparkSession,
                 warehouse: Warehouse, registry: TopicSchemas, may_replace: bool, skip_bad_records: bool,
                 say: Say) -> None:
        self.run_id, self.topic, self.table, self.ranges = run_id, topic, table, ranges
        self.spark, self.warehouse, self.registry, self.say = spark, warehouse, registry, say
        self.skip_bad_records = skip_bad_records
        # rows of these ranges can be in the table only below the highest offset ever loaded
        self.may_replace = may_replace
        self.kind = "audit" if topic == "_audit" else "avro"
        self.tr = TopicResult(topic, table, messages=sum(r.size for r in ranges))
        self.schemas: dict[int, dict] = {}

    # ------------------------------------------------------------------------------------------- shared
    def data_columns(self, ids: set[int], schemas: dict[int, dict]) -> list[tuple[str, T.DataType]]:
        """The table's columns after this run: existing ones plus the fields of every schema id seen."""
        if self.kind == "audit":
            return [(c, T.StringType() if t == "string" else T.LongType()) for c, t in AUDIT_TYPES.items()]
        existing = self.warehouse.data_columns(self.table) or []
        cols = list(existing)
        for sid in sorted(ids):
            if sid not in schemas:
                schema = self.registry.get(sid)
                if schema is None:
                    continue  # its records became bad records naming the id
                schemas[sid] = schema
            cols = merge_columns(cols, avro_columns(schemas[sid], f"{self.topic} schema id {sid}"),
                                 f"{self.topic} (table {self.table})")
        if not cols:
            raise BadRecordsError(f"{self.topic}: no record carries a registered Avro schema id; nothing to load "
                                  "(is the topic written in the registry's wire format?)")
        return cols

    def check_bad(self, samples: list[tuple[int, int, str]]) -> None:
        if not self.tr.bad:
            return
        where = "; ".join(f"{self.topic}/{p}@{o}: {e}" for p, o, e in sorted(samples)[:5])
        if not self.skip_bad_records:
            raise BadRecordsError(f"{self.topic}: {self.tr.bad} record(s) cannot be decoded, e.g. {where}. Nothing "
                                  "was committed; fix the data or re-run with --skip-bad-records")
        self.say(f"{self.topic}: SKIPPING {self.tr.bad} bad record(s) (--skip-bad-records), e.g. {where}")

    def check_shared(self, rows: int, hours: list[tuple[str, str]]) -> None:
        """The executors' files are where the driver will publish them (a worker without the shared mount
        writes to its own disk): their footers hold every row the splits reported, before anything commits."""
        seen = rows_written(self.warehouse.table_root(self.table), self.run_id, hours)
        if seen != rows:
            raise SharedStorageError(
                f"{self.topic}: the executors wrote {rows} rows but the driver sees {seen} under "
                f"{self.warehouse.table_root(self.table)}; is the warehouse mounted at the same path on every "
                "worker? (nothing was committed)")

    def replaced_counts(self) -> dict[int, int]:
        """Rows already in the table that this run re-loads, per bucket (so the audit counts stay net)."""
        wh = self.warehouse
        if self.topic == "_audit" or not self.may_replace:
            return {}
        existing = [h for h in self.tr.hours if wh.partition_location(self.table, *h) is not None]
        cond = ranges_filter(self.ranges)
        if not existing or cond is None:
            return {}
        bucket = (F.floor(F.unix_millis("_event_time") / 600000) * 600000).cast("long")
        rows = (self.spark.table(wh.qualified(self.table)).where(hours_filter(existing)).where(cond)
                .groupBy(bucket.alias("bucket")).count().collect())
        return {int(r["bucket"]): int(r["count"]) for r in rows}

    def net_counts(self, counts: dict[int, int]) -> dict[tuple[str, int], int]:
        out = {(self.topic, b): n for b, n in counts.items()}
        for b, n in self.replaced_counts().items():
            out[(self.topic, b)] = out.get((self.topic, b), 0) - n
        return {} if self.topic == "_audit" else out

    # ------------------------------------------------------------------------------------------- arrow
    def target(self) -> TopicTarget:
        """What this topic's splits need on the executors."""
        self.schemas = self.registry.of_topic(self.topic) if self.kind == "avro" else {}
        return TopicTarget(self.warehouse.table_root(self.table), self.kind, self.schemas)

    def finish_arrow(self, stats: list[Row], t0: float, t_read: float) -> TopicOutcome:
        """After the executors wrote this topic's rows: columns, bad records, table, old rows, counts."""
        wh = self.warehouse
        counts: dict[int, int] = defaultdict(int)
        ids, hours = set(), set()
        for r in stats:
            if r.kind == "rows":
                counts[int(r.bucket)] += int(r.rows)
                ids.add(int(r.schema_id))
                hours.add((r.dt, r.hr))
            elif r.kind == "bad":
                self.tr.bad += int(r.rows)
            elif r.kind == "time":
                self.tr.stages[r.error] = self.tr.stages.get(r.error, 0.0) + int(r.rows) / 1e6
        try:
            cols = self.data_columns(ids - {-1}, self.schemas)
            self.check_bad([(r.partition, r.offset, r.error) for r in stats if r.kind == "sample"])
            self.check_shared(sum(counts.values()), sorted(hours))
        except BaseException:
            wh.remove_versions(self.table, self.run_id)
            raise
        t_table = time.monotonic()
        if wh.ensure_table(self.table, cols):
            self.say(f"{self.topic}: table {wh.qualified(self.table)} created or evolved")
        self.tr.hours = sorted(hours)
        self.tr.rows = sum(counts.values())
        net = self.net_counts(counts)
        t_old = time.monotonic()
        versions = wh.write_versions(self.table, None, self.tr.hours, self.ranges, self.run_id,
                                     link_old=not self.may_replace)
        t_done = time.monotonic()
        self.tr.stages.update(driver_job=t_read - t0, driver_table=t_old - t_table,
                              driver_versions=t_done - t_old)
        self.tr.seconds = t_done - t0
        st = self.tr.stages
        cpu = ", ".join(f"{k} {st.get(k, 0.0):.1f} s" for k in ("fetch", "parse", "decode", "write"))
        self.say(f"{self.topic}: {self.tr.rows} rows into {len(self.tr.hours)} hour partition(s) (its splits, CPU: "
                 f"{cpu}; waiting {st.get('wait', 0.0):.1f} s; then table and counts {t_old - t_table:.1f} s, "
                 f"old rows and versions {t_done - t_old:.1f} s)")
        return self.tr, versions, net

    # ------------------------------------------------------------------------------------------- spark
    def run_spark(self, source: DataFrameReader) -> TopicOutcome:
        """Records of ``source`` (this topic's ranges) through the JVM: decode with mapInArrow, write with
        Spark's Parquet writer."""
        wh, t0 = self.warehouse, time.monotonic()
        self.say(f"{self.topic}: reading {self.tr.messages} messages -> {wh.qualified(self.table)}")
        raw = source.load().persist(StorageLevel.MEMORY_AND_DISK)
        try:
            schemas: dict[int, dict] = {}
            ids: set[int] = set()
            if self.kind == "avro":
                heads = [r[0] for r in raw.select(F.substring("value", 1, 5).alias("h")).distinct().collect()]
                ids = {int.from_bytes(bytes(h[1:5]), "big") for h in heads if h is not None and len(h) == 5
                       and h[0] == 0}
            if wh.ensure_table(self.table, self.data_columns(ids, schemas)):
                self.say(f"{self.topic}: table {wh.qualified(self.table)} created or evolved")
            schema = wh.table_schema(self.table)
            out_struct = T.StructType(list(schema.fields) + [T.StructField("_error", T.StringType(), True)])
            data_names = [f.name for f in schema.fields
                          if f.name not in ("_topic", "_partition", "_offset", "_event_time", "dt", "hr")]
            decoder = make_decoder(self.kind, data_names, to_arrow_schema(out_struct, timezone="UTC"), schemas,
                                   self.registry.zookeeper)
            decoded = raw.mapInArrow(decoder, out_struct).persist(StorageLevel.MEMORY_AND_DISK)
            t_columns = time.monotonic()
            try:
                bucket = (F.floor(F.unix_millis("_event_time") / 600000) * 600000).cast("long")
                stats = (decoded.groupBy("dt", "hr", bucket.alias("bucket"),
                                         F.col("_error").isNotNull().alias("bad")).count().collect())
                self.tr.bad = sum(int(r["count"]) for r in stats if r["bad"])
                if self.tr.bad:
                    sample = (decoded.where(F.col("_error").isNotNull()).select("_partition", "_offset", "_error")
                              .orderBy("_partition", "_offset").limit(5).collect())
                    self.check_bad([(r[0], r[1], r[2]) for r in sample])
                good = decoded.where(F.col("_error").isNull()).drop("_error")
                stats = [r for r in stats if not r["bad"]]
                self.tr.hours = sorted({(r["dt"], r["hr"]) for r in stats})
                counts: dict[int, int] = defaultdict(int)
                for r in stats:
                    counts[int(r["bucket"])] += int(r["count"])
                self.tr.rows = sum(counts.values())
                net = self.net_counts(counts)
                t_write = time.monotonic()
                versions = wh.write_versions(self.table, good, self.tr.hours, self.ranges, self.run_id)
                t_done = time.monotonic()
            finally:
                decoded.unpersist()
        finally:
            raw.unpersist()
        self.tr.stages.update(read=t_columns - t0, decode=t_write - t_columns, write=t_done - t_write)
        self.report(t0, f"read and schema ids {t_columns - t0:.1f} s, decode and count {t_write - t_columns:.1f} s, "
                        f"write {t_done - t_write:.1f} s")
        return self.tr, versions, net

    def report(self, t0: float, detail: str) -> None:
        """One line per topic: rows, hours, rows/s over its time since ``t0``, and where time went."""
        self.tr.seconds = time.monotonic() - t0
        self.say(f"{self.topic}: {self.tr.rows} rows into {len(self.tr.hours)} hour partition(s) in "
                 f"{self.tr.seconds:.1f} s ({self.tr.rows / max(self.tr.seconds, 1e-6):,.0f} rows/s; {detail})")


class TopicsLoader:
    """The topics of a run into their tables: all in ONE Spark job whose executors decode and write Parquet
    (``arrow``), or one after the other through Spark's writer (``spark``)."""

    def __init__(self, spark: SparkSession, warehouse: Warehouse, source: Source, *, zookeeper: str,
                 max_per_split: int | None, progress: bool, skip_bad_records: bool, say: Say) -> None:
        self.spark, self.warehouse, self.source, self.say = spark, warehouse, source, say
        self.zookeeper, self.max_per_split, self.progress = zookeeper, max_per_split, progress
        self.skip_bad_records = skip_bad_records
        self.split_rows: dict[int, int] = {}  # after an arrow load: rows written per split index (Spark task index)

    @staticmethod
    def job_group(run_id: str) -> str:
        """The job group of a run's Spark job (progress bar, executor report)."""
        return f"ferry-load-{run_id}"

    def load(self, run_id: str, plan: LoadPlan, tables: dict[str, str], bootstrap: str,
             loaded_to: dict[tuple[str, int], int], writer: str) -> list[TopicOutcome]:
        """(TopicResult, versions, audit counts) per topic with new data, in topic order."""
        registry = TopicSchemas(self.zookeeper)
        loads = []
        for topic in plan.topics():
            ranges = [r for r in plan.for_topic(topic) if r.size]
            if ranges:
                may_replace = any(r.start < loaded_to.get((r.topic, r.partition), 0) for r in ranges)
                loads.append(TopicLoad(run_id, topic, tables[topic], ranges, spark=self.spark,
                                       warehouse=self.warehouse, registry=registry, may_replace=may_replace,
                                       skip_bad_records=self.skip_bad_records, say=self.say))
        try:
            if not loads:
                return []
            if writer == "arrow":
                return self._load_arrow(loads, bootstrap)
            return [load.run_spark(self.source(load.ranges, bootstrap)) for load in loads]
        finally:
            registry.close()

    def _load_arrow(self, loads: list[TopicLoad], bootstrap: str) -> list[TopicOutcome]:
        """Every topic in ONE Spark job (executors decode and write Parquet), then each topic's driver part."""
        t0 = time.monotonic()
        run_id, wh = loads[0].run_id, self.warehouse
        ranges = [r for load in loads for r in load.ranges]
        target = SplitTarget(run_id, {load.topic: load.target() for load in loads}, self.zookeeper)
        total = sum(load.tr.messages for load in loads)
        self.say(f"loading {total} messages of {len(loads)} topic(s): " + ", ".join(
            f"{load.topic} ({load.tr.messages}) -> {wh.qualified(load.table)}" for load in loads))
        splits = split_ranges(ranges, self.max_per_split or None)
        try:
            with LoadProgress(self.spark, self.job_group(run_id), splits, enabled=self.progress):
                stats = self.source(ranges, bootstrap).option("ferry.load", target.to_json()).load().collect()
        except BaseException:
            for load in loads:
                wh.remove_versions(load.table, load.run_id)
            raise
        t_read = time.monotonic()
        self.say(f"the executors loaded {total} messages in {t_read - t0:.1f} s "
                 f"({total / max(t_read - t0, 1e-6):,.0f}/s)")
        by_topic: dict[str, list[Row]] = defaultdict(list)
        for r in stats:
            by_topic[r.topic].append(r)
            if r.kind == "split":
                self.split_rows[int(r.partition)] = int(r.rows)
        return [load.finish_arrow(by_topic[load.topic], t0, t_read) for load in loads]
