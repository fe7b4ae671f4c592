"""The load job: offset ranges -> hourly warehouse tables, committed only on success.

One run (under the state directory's lock):

1. recover: re-apply committed runs whose partition flips may not have happened (redo), delete the files
   of runs that never committed, delete superseded versions older than the grace period;
2. plan ranges from the ledger and the cluster (planner.py);
3. per topic: read the ranges with ``format("ferry")``, decode (Avro via the registry, or audit JSON),
   evolve the table, and write a new version of every hour partition the rows touch (warehouse.py);
4. commit: ONE atomic ledger write with the new offsets and the versions to publish;
5. apply: flip the partitions' locations in the metastore, publish the warehouse audit counts, mark
   the run applied (all idempotent: step 1 of the next run repeats it after a crash).

Runnable in-process (``ferry load``, the DAG's default) and through spark-submit::

    spark-submit --master local[2] loaders/cli.py --zookeeper ZK --topics 'page_views|clicks'
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from ferry.loaders.ledger import Ledger
from ferry.loaders.load_config import (  # noqa: F401
    BadRecordsError,
    LoadConfig,
    LoadResult,
    TopicResult,
    new_run_id,
)
from ferry.loaders.offsets import OffsetRange, offsets_json
from ferry.loaders.planner import StartPosition, make_plan


class LoadJob:
    def __init__(self, config: LoadConfig, spark=None) -> None:
        self.config = config
        self.ledger = Ledger(config.state_dir)
        self._spark = spark
        self._warehouse = None
        self._datacenter = ""

    # ------------------------------------------------------------------------------------------- helpers
    def say(self, msg: str) -> None:
        if not self.config.quiet:
            print(f"[ferry load {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    @property
    def spark(self):
        if self._spark is None:
            from ferry.loaders.session import build_session

            self._spark = build_session(self.config.state_dir, master=self.config.master,
                                        warehouse=self.config.warehouse_root,
                                        metastore_uris=self.config.metastore_uris, conf=self.config.spark_conf)
        else:
            from ferry.loaders.datasource import register

            register(self._spark)
        return self._spark

    @property
    def warehouse(self):
        if self._warehouse is None:
            from ferry.loaders.warehouse import Warehouse

            self._warehouse = Warehouse(self.spark, self.config.warehouse_root, self.config.database)
            self._warehouse.ensure_database()
        return self._warehouse

    # ------------------------------------------------------------------------------------------- the run
    def run(self) -> LoadResult:
        with self.ledger.lock(self.config.lock_timeout_s):
            self.ledger.check_source(self.config.zookeeper, self.config.allow_source_change)
            self.recover()
            return self._run_locked()

    def _run_locked(self) -> LoadResult:
        from ferry.client.bootstrap import discover
        from ferry.loaders.cluster_offsets import ClusterOffsets

        cfg = self.config
        bootstrap, brokers = discover(cfg.zookeeper)
        self._datacenter = next((b.datacenter for b in brokers.values() if b.datacenter), "")
        with ClusterOffsets(zookeeper=cfg.zookeeper, bootstrap=bootstrap) as cluster:
            topics = cluster.select_topics(cfg.topics)
            if cfg.include_audit:
                all_topics = cluster.topics()
                if "_audit" in all_topics:
                    topics["_audit"] = all_topics["_audit"]
            if not topics:
                self.say(f"no topic matches {cfg.topics!r}; nothing to do")
            committed = self.ledger.committed_offsets()
            plan = make_plan(cluster, topics, committed, start=StartPosition.parse(cfg.start),
                             max_per_split=cfg.max_per_split, skip_lost_data=cfg.skip_lost_data, until=cfg.until)
        run_id = new_run_id()
        result = LoadResult(run_id, plan)
        self.say(f"run {run_id}: {plan.total} messages in {len(plan.splits)} splits from {len(topics)} topic(s)")
        if plan.total:
            self.say("plan:\n" + plan.describe())
        changed = [r for r in plan.ranges if committed.get((r.topic, r.partition)) != r.end]
        if not changed and not plan.lost:
            self.say("nothing new since the last committed run")
            return result
        from ferry.loaders.warehouse import table_for_topic

        tables = {t: table_for_topic(t) for t in plan.topics()}
        self.ledger.begin(run_id, [self.warehouse.table_root(tb) for tb in tables.values()])
        versions = []
        audit_counts: dict[tuple[str, int], int] = defaultdict(int)
        for topic in plan.topics():
            ranges = [r for r in plan.for_topic(topic) if r.size]
            if not ranges:
                continue
            tr, tv, counts = self._load_topic(run_id, topic, tables[topic], ranges, bootstrap)
            result.topics.append(tr)
            versions.extend(tv)
            for k, n in counts.items():
                audit_counts[k] += n
        from ferry.loaders.warehouse_audit import warehouse_events

        events = warehouse_events(run_id, audit_counts, datacenter=self._datacenter)
        record: dict[str, Any] = {
            "run_id": run_id,
            "ranges": [r.to_dict() for r in plan.ranges],
            "partitions": [v.to_dict() for v in versions],
            "audit": [e.to_json().decode() for e in events],
            "rows": result.rows,
            "lost": [x.to_dict() for x in plan.lost],
            "bootstrap": bootstrap,
            "hours": {t.table: [list(h) for h in t.hours] for t in result.topics},
        }
        self.ledger.commit(record)
        result.committed = True
        self.say(f"committed run {run_id}: {result.rows} rows, {len(versions)} hour partitions")
        result.audit_events = self.apply(record)
        return result

    # ------------------------------------------------------------------------------------------- recovery
    def recover(self) -> None:
        """Redo committed runs, remove files of runs that never committed, collect old versions."""
        for record in self.ledger.pending():
            self.say(f"re-applying committed run {record['run_id']} (the previous process stopped before "
                     "publishing it)")
            self.apply(record)
        in_flight = self.ledger.in_flight()
        if in_flight or self.ledger.read()["garbage"]:
            wh = self.warehouse
            for run_id, info in in_flight.items():
                removed = 0
                for root in info.get("roots", []):
                    for path in wh.glob(f"{root}/dt=*/hr=*/ferry_run={run_id}"):
                        wh.delete(path)
                        removed += 1
                    # a killed Spark job leaves its committer's scratch space; a later job in the same
                    # application attempt would merge its committed tasks (we hold the lock: no writer now)
                    wh.delete(f"{root}/_temporary")
                self.say(f"run {run_id} never committed: removed its {removed} unpublished partition version(s)")
                self.ledger.abandon(run_id)
            for path in self.ledger.take_garbage(self.config.gc_grace_s):
                wh.delete(path)

    def apply(self, record: dict[str, Any]) -> int:
        """Make a committed run visible (idempotent): flip partitions, publish audit counts."""
        from ferry.client.audit.event import AuditEvent
        from ferry.loaders.warehouse import PartitionVersion
        from ferry.loaders.warehouse_audit import publish

        versions = [PartitionVersion.from_dict(d) for d in record.get("partitions", [])]
        wh = self.warehouse if versions else None
        for v in versions:
            wh.set_partition(v)
        for table in sorted({v.table for v in versions}):
            wh.refresh(table)
        events = [AuditEvent.from_json(e) for e in record.get("audit", [])]
        if events:
            self._ensure_audit_topic()
        sent = publish(events, record.get("bootstrap") or self._bootstrap())
        superseded = [v.previous for v in versions if v.previous and v.previous.rstrip("/") != v.location.rstrip("/")]
        self.ledger.mark_applied(record["run_id"], superseded)
        if sent:
            self.say(f"published {sent} warehouse audit event(s) to _audit")
        return sent

    def _ensure_audit_topic(self) -> None:
        """The warehouse is an audit tier: create `_audit` (1 partition) if nobody did yet."""
        from ferry.zk import ClusterRegistry, TopicExistsError

        with ClusterRegistry(self.config.zookeeper) as reg:
            if reg.topic("_audit") is None:
                try:
                    reg.create_topic("_audit", 1)
                    self.say("created topic _audit (1 partition)")
                except TopicExistsError:
                    pass

    def _bootstrap(self) -> str:
        from ferry.client.bootstrap import discover

        return discover(self.config.zookeeper)[0]

    # ------------------------------------------------------------------------------------------- one topic
    def _load_topic(self, run_id: str, topic: str, table: str, ranges: list[OffsetRange], bootstrap: str):
        from pyspark import StorageLevel
        from pyspark.sql import functions as F
        from pyspark.sql import types as T
        from pyspark.sql.pandas.types import to_arrow_schema

        from ferry.loaders.avro_columns import uuid_fields
        from ferry.loaders.decoder import AUDIT_COLUMNS, make_decoder

        t0 = time.monotonic()
        tr = TopicResult(topic, table, messages=sum(r.size for r in ranges))
        wh = self.warehouse
        self.say(f"{topic}: reading {tr.messages} messages -> {wh.qualified(table)}")
        raw = self.source(topic, ranges, bootstrap).load().persist(StorageLevel.MEMORY_AND_DISK)
        try:
            kind = "audit" if topic == "_audit" else "avro"
            schemas: dict[int, dict] = {}
            if kind == "avro":
                data_cols = self._avro_columns(topic, table, raw, schemas)
            else:
                data_cols = [(c, T.StringType() if c in ("guid", "topic", "tier", "host", "datacenter",
                                                         "application") else T.LongType())
                             for c in AUDIT_COLUMNS]
            if wh.ensure_table(table, data_cols):
                self.say(f"{topic}: table {wh.qualified(table)} created or evolved")
            schema = wh.table_schema(table)
            out_struct = T.StructType(list(schema.fields) + [T.StructField("_error", T.StringType(), True)])
            data_names = [f.name for f in schema.fields
                          if f.name not in ("_topic", "_partition", "_offset", "_event_time", "dt", "hr")]
            arrow_schema = to_arrow_schema(out_struct, timezone="UTC")
            text_cols = set()
            for sch in schemas.values():
                text_cols |= uuid_fields(sch)
            decoded = raw.mapInArrow(make_decoder(kind, data_names, arrow_schema, schemas, text_cols), out_struct)
            decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
            t_columns = time.monotonic()
            try:
                bucket = (F.floor(F.unix_millis("_event_time") / 600000) * 600000).cast("long")
                stats = (decoded.groupBy("dt", "hr", bucket.alias("bucket"),
                                         F.col("_error").isNotNull().alias("bad")).count().collect())
                tr.bad = sum(int(r["count"]) for r in stats if r["bad"])
                good = self._check_bad(topic, decoded, tr)
                stats = [r for r in stats if not r["bad"]]
                tr.hours = sorted({(r["dt"], r["hr"]) for r in stats})
                counts: dict[tuple[str, int], int] = defaultdict(int)
                for r in stats:
                    counts[(topic, int(r["bucket"]))] += int(r["count"])
                tr.rows = sum(counts.values())
                if topic != "_audit":
                    for k, n in self._replaced_counts(table, tr.hours, ranges, bucket).items():
                        counts[(topic, k)] -= n
                t_write = time.monotonic()
                versions = wh.write_versions(table, good, tr.hours, ranges, run_id)
                t_done = time.monotonic()
            finally:
                decoded.unpersist()
        finally:
            raw.unpersist()
        tr.seconds = time.monotonic() - t0
        self.say(f"{topic}: {tr.rows} rows into {len(tr.hours)} hour partition(s) "
                 f"in {tr.seconds:.1f} s ({tr.rows / max(tr.seconds, 1e-6):,.0f} rows/s; read and schema ids "
                 f"{t_columns - t0:.1f} s, decode and count {t_write - t_columns:.1f} s, "
                 f"write {t_done - t_write:.1f} s)")
        return tr, versions, ({} if topic == "_audit" else dict(counts))

    def source(self, topic: str, ranges: list[OffsetRange], bootstrap: str):
        """The DataFrameReader of a topic's offset ranges: ``format("ferry")`` with Spark's Kafka-source
        options. The one place that says where a load's records come from; the rest of the job sees only
        the source's columns (key, value, topic, partition, offset, timestamp, headers)."""
        return (self.spark.read.format("ferry")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", offsets_json({(r.topic, r.partition): r.start for r in ranges}))
                .option("endingOffsets", offsets_json({(r.topic, r.partition): r.end for r in ranges}))
                .option("maxRecordsPerPartition", str(self.config.max_per_split or 0)))

    def _avro_columns(self, topic: str, table: str, raw, schemas: dict[int, dict]):
        """The table's columns after this run: existing ones plus the fields of every schema id in the data."""
        from pyspark.sql import functions as F

        from ferry.loaders.avro_columns import avro_columns, merge_columns
        from ferry.schemas.errors import UnknownSchemaError
        from ferry.schemas.registry import SchemaRegistry

        headers = [r[0] for r in raw.select(F.substring("value", 1, 5).alias("h")).distinct().collect()]
        ids = sorted({int.from_bytes(bytes(h[1:5]), "big") for h in headers
                      if h is not None and len(h) == 5 and h[0] == 0})
        existing = self.warehouse.data_columns(table) or []
        cols = list(existing)
        with SchemaRegistry(self.config.zookeeper, read_only=True) as registry:
            for sid in ids:
                try:
                    schemas[sid] = registry.get(sid)
                except UnknownSchemaError:
                    continue  # its records become bad records naming the id
                cols = merge_columns(cols, avro_columns(schemas[sid], f"{topic} schema id {sid}"),
                                     f"{topic} (table {table})")
        if not cols:
            raise BadRecordsError(f"{topic}: no record carries a registered Avro schema id; nothing to load "
                                  "(is the topic written in the registry's wire format?)")
        return cols

    def _check_bad(self, topic: str, decoded, tr: TopicResult):
        from pyspark.sql import functions as F

        bad = decoded.where(F.col("_error").isNotNull())
        if tr.bad:
            sample = bad.select("_partition", "_offset", "_error").orderBy("_partition", "_offset").limit(5).collect()
            where = "; ".join(f"{topic}/{r['_partition']}@{r['_offset']}: {r['_error']}" for r in sample)
            if not self.config.skip_bad_records:
                raise BadRecordsError(f"{topic}: {tr.bad} record(s) cannot be decoded, e.g. {where}. Nothing was "
                                      "committed; fix the data or re-run with --skip-bad-records")
            self.say(f"{topic}: SKIPPING {tr.bad} bad record(s) (--skip-bad-records), e.g. {where}")
        return decoded.where(F.col("_error").isNull()).drop("_error")

    def _replaced_counts(self, table: str, hours, ranges, bucket) -> dict[int, int]:
        """Rows already in the table that this run re-loads, per bucket (so the audit counts stay net)."""
        from ferry.loaders.warehouse import hours_filter, ranges_filter

        wh = self.warehouse
        existing = [h for h in hours if wh.partition_location(table, *h) is not None]
        cond = ranges_filter(ranges)
        if not existing or cond is None:
            return {}
        rows = (self.spark.table(wh.qualified(table)).where(hours_filter(existing)).where(cond)
                .groupBy(bucket.alias("bucket")).count().collect())
        return {int(r["bucket"]): int(r["count"]) for r in rows}

    # ------------------------------------------------------------------------------------------- reconcile
    def reconcile(self, hours: list[tuple[str, str]], topics: list[str] | None = None):
        """Balance the books of ``hours`` from ferry_audit and write them to ferry_completeness."""
        from ferry.loaders.completeness import reconcile_hours

        if topics is None:
            topics = self.data_topics()
        return reconcile_hours(self, topics, hours)

    def data_topics(self) -> list[str]:
        return sorted(t for t in self.ledger.read()["offsets"] if t != "_audit")
