"""The load job: offset ranges -> hourly warehouse tables, committed only on success.

One run (under the state directory's lock):

1. recover (run_applier.py): re-apply committed runs whose partition flips may not have happened (redo),
   delete the files of runs that never committed, delete superseded versions older than the grace period;
2. plan ranges from the ledger and the cluster (planner.py);
3. per topic (topic_load.py): read the ranges with ``format("ferry")``, decode (Avro via the registry, or
   audit JSON) a column at a time, write a new version of every hour partition the rows touch (on the
   executors with pyarrow, or with Spark's writer), evolve the table (warehouse.py);
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

from pyspark.sql import DataFrameReader, SparkSession

from ferry.client.bootstrap import discover
from ferry.loaders import native
from ferry.loaders.client_file import reader_options
from ferry.loaders.cluster_offsets import ClusterOffsets
from ferry.loaders.completeness import CompletenessBooks
from ferry.loaders.datasource import register
from ferry.loaders.executor_report import ExecutorReport
from ferry.loaders.failed_run import note_failure
from ferry.loaders.ledger import Ledger
from ferry.loaders.load_config import LoadConfig, LoadResult, RunState, new_run_id
from ferry.loaders.naming import table_for_topic
from ferry.loaders.offsets import OffsetRange, offsets_json
from ferry.loaders.planner import StartPosition, make_plan, topics_to_load
from ferry.loaders.run_applier import RunApplier
from ferry.loaders.session import build_session
from ferry.loaders.topic_load import TopicsLoader
from ferry.loaders.warehouse import Warehouse
from ferry.loaders.warehouse_audit import HourStatus, warehouse_events


class LoadJob:
    """The load's coordinator: it makes the collaborators of a run (Spark session, warehouse, ledger, the
    topics' loader, the completeness books) from its config and hands each the values it needs."""

    def __init__(self, config: LoadConfig, spark: SparkSession | None = None) -> None:
        self.config = config
        self.ledger = Ledger(config.state_dir)
        self.client = config.offline_client()  # TLS/SASL towards the offline brokers (the driver's clients)
        self._spark = spark
        self._warehouse: Warehouse | None = None
        self._t0 = 0.0

    # ------------------------------------------------------------------------------------------- helpers
    def say(self, msg: str) -> None:
        if not self.config.quiet:
            print(f"[ferry load {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            cfg = self.config
            local = "://" not in cfg.warehouse_root or cfg.warehouse_root.startswith("file:")
            conf = ({"spark.ui.showConsoleProgress": "false"} if cfg.progress else {}) | cfg.spark_conf  # one kind of bar
            self._spark = build_session(cfg.state_dir, master=cfg.master, warehouse=cfg.warehouse_root,
                                        metastore_uris=cfg.metastore_uris, conf=conf,
                                        quick_jit=cfg.parquet_writer == "arrow" or (cfg.parquet_writer == "auto"
                                                                                   and local))
        else:
            register(self._spark)
        return self._spark

    @property
    def warehouse(self) -> Warehouse:
        if self._warehouse is None:
            self._warehouse = Warehouse(self.spark, self.config.warehouse_root, self.config.database)
            self._warehouse.ensure_database()
        return self._warehouse

    # ------------------------------------------------------------------------------------------- the run
    def run(self) -> LoadResult:
        self._t0 = time.monotonic()
        run = RunState()
        with self.ledger.lock(self.config.lock_timeout_s):
            try:
                self.ledger.check_source(self.config.zookeeper, self.config.allow_source_change)
                self.recover()
                return self._run_locked(run)
            except BaseException as e:  # noted in the ledger (never as loaded), then raised as before
                note_failure(self.ledger, run, e, zookeeper=self.config.zookeeper, say=self.say,
                             client_config=self.client)
                raise

    def _lap(self, result: LoadResult, stage: str) -> None:
        """Seconds since the last lap, added to ``result.stages[stage]`` (the run's own time split)."""
        now = time.monotonic()
        result.stages[stage] = result.stages.get(stage, 0.0) + now - self._t0
        self._t0 = now

    def _run_locked(self, run: RunState) -> LoadResult:
        cfg = self.config
        native.available()  # warns here, at the top of the run, when the executors will decode in Python
        client = self.client
        bootstrap, brokers = discover(cfg.zookeeper, security_protocol=client.security_protocol)
        datacenter = next((b.datacenter for b in brokers.values() if b.datacenter), "")
        with ClusterOffsets(zookeeper=cfg.zookeeper, bootstrap=bootstrap, client_config=client) as cluster:
            topics = topics_to_load(cluster, cfg.topics, cfg.include_audit)
            if not topics:
                self.say(f"no topic matches {cfg.topics!r}; nothing to do")
            committed = self.ledger.committed_offsets()
            plan = make_plan(cluster, topics, committed, start=StartPosition.parse(cfg.start),
                             max_per_split=cfg.max_per_split, skip_lost_data=cfg.skip_lost_data, until=cfg.until)
        run_id = new_run_id()
        result = LoadResult(run_id, plan)
        run.run_id, run.plan, run.result = run_id, plan, result
        self._lap(result, "plan")
        self.say(f"run {run_id}: {plan.total} messages in {len(plan.splits)} splits from {len(topics)} topic(s)")
        if plan.total:
            self.say("plan:\n" + plan.describe())
        changed = [r for r in plan.ranges if committed.get((r.topic, r.partition)) != r.end]
        if not changed and not plan.lost:
            self.say("nothing new since the last committed run")
            return result
        tables = {t: table_for_topic(t) for t in plan.topics()}
        self.ledger.begin(run_id, [self.warehouse.table_root(tb) for tb in tables.values()])
        self._lap(result, "begin")
        versions = []
        audit_counts: dict[tuple[str, int], int] = defaultdict(int)
        loader = TopicsLoader(self.spark, self.warehouse, self.source, zookeeper=cfg.zookeeper,
                              max_per_split=cfg.max_per_split, progress=cfg.progress,
                              skip_bad_records=cfg.skip_bad_records, say=self.say)
        for tr, tv, counts in loader.load(run_id, plan, tables, bootstrap, self.ledger.loaded_to(),
                                          self.parquet_writer()):
            result.topics.append(tr)
            versions.extend(tv)
            for k, n in counts.items():
                audit_counts[k] += n
        self._lap(result, "topics")
        self.report_executors(result, loader, run_id)
        events = warehouse_events(run_id, audit_counts, datacenter=datacenter)
        record: dict[str, Any] = {
            "run_id": run_id,
            "ranges": [r.to_dict() for r in plan.ranges],
            "partitions": [v.to_dict() for v in versions],
            "audit": [e.to_json().decode() for e in events],
            "rows": result.rows,
            "lost": [x.to_dict() for x in plan.lost],
            "bootstrap": bootstrap,
            "hours": {t.table: [list(h) for h in t.hours] for t in result.topics},
            "started": run.started,
        }
        self.ledger.commit(record)
        result.committed = True
        self._lap(result, "commit")
        self.say(f"committed run {run_id}: {result.rows} rows, {len(versions)} hour partitions")
        result.audit_events = self.apply(record)
        self._lap(result, "apply")
        total = sum(result.stages.values())
        self.say(f"run time {total:.1f} s ({result.rows / max(total, 1e-6):,.0f} rows/s): "
                 + ", ".join(f"{k} {v:.1f} s" for k, v in result.stages.items()))
        return result

    def report_executors(self, result: LoadResult, loader: TopicsLoader, run_id: str) -> None:
        """Tasks and rows per executor (and its worker) of the run's Spark job, while the driver's UI is up."""
        shares = ExecutorReport(self.spark).shares(loader.job_group(run_id), loader.split_rows)
        result.executors = [s.to_dict() for s in shares]
        if shares:
            workers = sorted({s.worker for s in shares if s.tasks})
            self.say(f"tasks ran on {len(workers)} worker(s):\n" + "\n".join("  " + s.describe() for s in shares))

    # ------------------------------------------------------------------------------------------- redo/undo
    def _applier(self) -> RunApplier:
        """Made per use: it works on this job's ledger, the one whose lock the run holds."""
        return RunApplier(self.ledger, lambda: self.warehouse, zookeeper=self.config.zookeeper,
                          gc_grace_s=self.config.gc_grace_s, say=self.say, client_config=self.client)

    def recover(self) -> None:
        """Redo committed runs, remove files of runs that never committed, collect old versions."""
        self._applier().recover()

    def apply(self, record: dict[str, Any]) -> int:
        """Make a committed run visible (idempotent): flip its partitions, publish its audit counts."""
        return self._applier().apply(record)

    # ------------------------------------------------------------------------------------------- one topic
    def parquet_writer(self) -> str:
        """``arrow`` (executors write Parquet themselves) or ``spark`` (Spark's writer; any Hadoop URI)."""
        choice = self.config.parquet_writer
        if choice == "auto":
            return "arrow" if self.warehouse.root.startswith("file:") else "spark"
        return choice

    def source(self, ranges: list[OffsetRange], bootstrap: str) -> DataFrameReader:
        """The DataFrameReader of offset ranges (of one or more topics): ``format("ferry")`` with Spark's
        Kafka-source options. The one place that says where a load's records come from; the job adds only
        the ``ferry.load`` option (decode and write on the executors) or reads the source's columns (key,
        value, topic, partition, offset, timestamp, headers) for Spark's writer."""
        return (self.spark.read.format("ferry")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", ",".join(sorted({r.topic for r in ranges})))
                .option("startingOffsets", offsets_json({(r.topic, r.partition): r.start for r in ranges}))
                .option("endingOffsets", offsets_json({(r.topic, r.partition): r.end for r in ranges}))
                .option("maxRecordsPerPartition", str(self.config.max_per_split or 0))
                .options(**reader_options(self.spark, self.config.client_config, self.config.state_dir)))

    # ------------------------------------------------------------------------------------------- reconcile
    def reconcile(self, hours: list[tuple[str, str]], topics: list[str] | None = None) -> list[HourStatus]:
        """Balance the books of ``hours`` from ferry_audit and write them to ferry_completeness."""
        cfg = self.config
        books = CompletenessBooks(self.spark, self.warehouse, self.ledger, database=cfg.database,
                                  lock_timeout_s=cfg.lock_timeout_s, live_zookeepers=cfg.live_zookeepers,
                                  live_timeout_s=cfg.live_timeout_s, live_client_config=cfg.live_client())
        return books.reconcile(self.data_topics() if topics is None else topics, hours)

    def data_topics(self) -> list[str]:
        return sorted(t for t in self.ledger.read()["offsets"] if t != "_audit")
