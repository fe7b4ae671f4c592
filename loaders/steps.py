"""The load pipeline's steps, shared by ``ferry load``, spark-submit and the Airflow DAGs.

- ``plan``: ranges from the ledger and the cluster (no Spark), the end offsets become the load's cap;
- ``load``: one committed load run (load_job.LoadJob);
- ``reconcile``: load `_audit` once more (so the warehouse counts just published are in ferry_audit),
  then balance the books of the hours that changed and write them to ferry_completeness.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ferry.audit.completeness import HourStatus
from ferry.client.topic_selection import select_topics
from ferry.loaders.cluster_offsets import ClusterOffsets
from ferry.loaders.ledger import Ledger
from ferry.loaders.load_config import LoadConfig, LoadResult
from ferry.loaders.planner import LoadPlan, StartPosition, make_plan, topics_to_load

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ferry.loaders.load_job import LoadJob


def match_topics(spec: str | list[str], names) -> list[str]:
    """The names (e.g. topics the ledger knows) selected by a --topics spec; `_audit` never."""
    return select_topics(spec, set(names) - {"_audit"}, strict=False)


def plan(cfg: LoadConfig) -> LoadPlan:
    """What a load would read now (read-only: the ledger is not changed)."""
    with ClusterOffsets(zookeeper=cfg.zookeeper, client_config=cfg.offline_client()) as cluster:
        return make_plan(cluster, topics_to_load(cluster, cfg.topics, cfg.include_audit), Ledger(cfg.state_dir).committed_offsets(),
                         start=StartPosition.parse(cfg.start), max_per_split=cfg.max_per_split,
                         skip_lost_data=cfg.skip_lost_data, until=cfg.until)


def load_job(cfg: LoadConfig, spark: SparkSession | None = None) -> LoadJob:
    """The job of ``cfg``: imported here, when a step needs Spark (the plan step and ``ferry load --help`` do not
    import pyspark)."""
    from ferry.loaders.load_job import LoadJob  # pyspark, pyarrow: a second or more of start-up

    return LoadJob(cfg, spark)


def load(cfg: LoadConfig, spark: SparkSession | None = None) -> tuple[LoadJob, LoadResult]:
    job = load_job(cfg, spark)
    return job, job.run()


def reconcile(cfg: LoadConfig, hours: list[tuple[str, str]] = (), *, since: float | None = None,
              spark: SparkSession | None = None, catch_up_audit: bool = True) -> tuple[LoadJob, list[HourStatus]]:
    """Books of ``hours`` plus every hour that loads committed since ``since`` (epoch s) or this step's
    own `_audit` catch-up touched; for the topics of ``cfg.topics`` the ledger knows."""
    hours = set(map(tuple, hours))
    job = load_job(replace(cfg, topics=["_audit"], include_audit=False, until=None), spark)
    if catch_up_audit:
        with ClusterOffsets(zookeeper=cfg.zookeeper, client_config=cfg.offline_client()) as cluster:
            has_audit = "_audit" in cluster.topics()
        if has_audit:
            result = job.run()
            hours.update(result.hours(include_audit=True))
    if since is not None:
        for entry in job.ledger.history():
            if entry.get("committed_at", 0) >= since:
                for table_hours in entry.get("hours", {}).values():
                    hours.update(tuple(h) for h in table_hours)
    topics = match_topics(cfg.topics, job.ledger.committed_offsets_topics())
    statuses = job.reconcile(sorted(hours), topics)
    return job, statuses


def load_and_reconcile(cfg: LoadConfig, spark: SparkSession | None = None) -> tuple[LoadResult, list[HourStatus]]:
    started = time.time()
    job, result = load(cfg, spark)
    if not cfg.include_audit:
        return result, []
    _, statuses = reconcile(cfg, result.hours(), since=started, spark=job.spark)
    return result, statuses
