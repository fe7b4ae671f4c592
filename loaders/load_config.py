"""What a load run is asked to do (LoadConfig) and what it did (LoadResult): shared by the job, the command
line, the DAG steps and the completeness books without importing each other."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ferry.loaders.planner import LoadPlan
from ferry.wire.client_config import ClientConfig

Say = Callable[[str], None]  # a run's progress lines for people (LoadJob.say)


class BadRecordsError(RuntimeError):
    """Records that cannot be decoded; the run stops before anything becomes visible."""


@dataclass
class LoadConfig:
    zookeeper: str
    topics: str | list[str]
    state_dir: str
    warehouse: str | None = None  # default <state_dir>/warehouse; any Hadoop URI
    database: str = "ferry"
    master: str | None = "local[2]"  # None: from spark-submit
    # the Hive metastore, any sql_metastore spec: postgresql://USER@HOST/DB, thrift://HOST:PORT, derby:DIR;
    # None: $FERRY_METASTORE, else the embedded Derby in state_dir (one process at a time)
    metastore_uris: str | None = None
    start: str = "earliest"
    max_per_split: int = 1_000_000
    # who writes Parquet: "arrow" (the executors, with pyarrow: fast), "spark" (Spark's writer: any Hadoop
    # URI), "auto" = arrow for a local warehouse, spark otherwise
    parquet_writer: str = "auto"
    skip_lost_data: bool = False
    skip_bad_records: bool = False
    include_audit: bool = True  # also load `_audit` into ferry_audit
    until: dict[tuple[str, int], int] | None = None  # cap end offsets (a plan made earlier)
    gc_grace_s: float = 3600.0
    lock_timeout_s: float = 1800.0
    allow_source_change: bool = False
    spark_conf: dict[str, str] = field(default_factory=dict)
    # live clusters whose producer counts decide completeness (their own `_audit`, read directly); none:
    # the books use only the producer counts that reached the offline cluster (see docs/audit.md)
    live_zookeepers: list[str] = field(default_factory=list)
    live_timeout_s: float = 15.0
    quiet: bool = False
    progress: bool = False  # a progress bar per topic while the executors load (only on a terminal)
    # client properties files (librdkafka's security.protocol, sasl.*, ssl.*) for the offline cluster's brokers
    # and for the live clusters' (completeness); a path, never the settings: the split readers on the
    # executors read the same file (client_file.py), so no secret rides in Spark's conf or task closures
    client_config: str | None = None
    live_client_config: str | None = None

    def offline_client(self) -> ClientConfig:
        return ClientConfig.from_file(self.client_config) if self.client_config else ClientConfig.plaintext()

    def live_client(self) -> ClientConfig:
        return ClientConfig.from_file(self.live_client_config) if self.live_client_config else ClientConfig.plaintext()

    @property
    def warehouse_root(self) -> str:
        return self.warehouse or str(Path(self.state_dir).resolve() / "warehouse")


@dataclass
class TopicResult:
    topic: str
    table: str
    messages: int = 0
    rows: int = 0
    bad: int = 0
    hours: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)  # where the time went (executors' CPU, driver)


@dataclass
class LoadResult:
    run_id: str
    plan: LoadPlan | None
    topics: list[TopicResult] = field(default_factory=list)
    committed: bool = False
    audit_events: int = 0
    stages: dict[str, float] = field(default_factory=dict)  # seconds: plan, begin, topics, commit, apply
    # where the work ran (executor_report.ExecutorShare.to_dict): executor, worker, tasks, rows, rows/s;
    # empty when the driver's UI is off (local mode)
    executors: list[dict] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Rows loaded into the topics' tables (`_audit` not counted)."""
        return sum(t.rows for t in self.topics if t.topic != "_audit")

    def hours(self, include_audit: bool = False) -> list[tuple[str, str]]:
        out = set()
        for t in self.topics:
            if include_audit or t.topic != "_audit":
                out.update(t.hours)
        return sorted(out)

    def to_dict(self) -> dict:
        return {"run_id": self.run_id, "committed": self.committed, "rows": self.rows,
                "audit_events": self.audit_events,
                "topics": [{"topic": t.topic, "table": t.table, "messages": t.messages, "rows": t.rows,
                            "bad": t.bad, "hours": [list(h) for h in t.hours],
                            "stages": {k: round(v, 3) for k, v in t.stages.items()}} for t in self.topics],
                "plan": self.plan.to_dict() if self.plan else None, "executors": self.executors,
                "stages": {k: round(v, 3) for k, v in self.stages.items()}}


@dataclass
class RunState:
    """How far the current run got: what a failed run's note in the ledger is made of (failed_run.py)."""

    started: float = field(default_factory=time.time)
    run_id: str | None = None  # None: failed before it had a plan
    plan: LoadPlan | None = None
    result: LoadResult | None = None


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
