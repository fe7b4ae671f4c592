"""``ferry_completeness``: one row per topic and hour saying whether the warehouse has every message.

The producers' counts that decide are the live clusters' own (``LoadConfig.live_zookeepers``, read directly
and merged by guid with ``ferry_audit``); :func:`ferry.audit.completeness.books` decides each status.
``revision`` counts how often an hour was published again with another row count (late data).

Rows are derived (recomputed from ``ferry_audit`` whenever an hour is evaluated again, e.g. after late
data), so the table is written with the same versioned-partition swap as the data tables but outside the
ledger: a re-evaluation replaces the hour's rows for the topics it evaluated and keeps the others.
"""

from __future__ import annotations

import datetime as dt
from contextlib import nullcontext
from typing import TYPE_CHECKING

from ferry.audit.completeness import HourStatus, books
from ferry.loaders.warehouse import AUDIT_TABLE, COMPLETENESS_TABLE, hours_filter
from ferry.loaders.warehouse_audit import event_from_dict

if TYPE_CHECKING:
    from ferry.loaders.load_job import LoadJob

AUDIT_FIELDS = ("guid", "topic", "tier", "bucket_start", "bucket_end", "count", "host", "datacenter",
                "application", "time")


def completeness_columns():
    from pyspark.sql import types as T

    return [("topic", T.StringType()), ("hour_start", T.TimestampType()), ("produced", T.LongType()),
            ("mirrored", T.LongType()), ("loaded", T.LongType()), ("missing", T.LongType()),
            ("duplicates", T.LongType()), ("complete", T.BooleanType()), ("status", T.StringType()),
            ("evaluated_at", T.TimestampType()), ("revision", T.IntegerType())]


def read_audit_events(job: LoadJob, hours: list[tuple[str, str]]):
    wh = job.warehouse
    if not hours or not wh.exists_table(AUDIT_TABLE):
        return []
    rows = (job.spark.table(wh.qualified(AUDIT_TABLE)).where(hours_filter(hours))
            .select(*AUDIT_FIELDS).collect())
    return [event_from_dict(r.asDict()) for r in rows]


def reconcile_hours(job: LoadJob, topics: list[str], hours: list[tuple[str, str]]) -> list[HourStatus]:
    """Books for every (topic, hour); writes them to ferry_completeness and returns them."""
    hours = sorted(set(hours))
    topics = sorted(set(topics) - {"_audit"})
    if not hours or not topics:
        return []
    events = read_audit_events(job, hours)
    unreachable: list[str] = []
    if job.config.live_zookeepers:
        from ferry.audit.live import read_live_counts

        live = read_live_counts(job.config.live_zookeepers, job.config.live_timeout_s)
        events.extend(live.events)
        unreachable = live.unreachable
    statuses = books(events, topics, hours, unreachable=unreachable)
    write_statuses(job, statuses)
    return statuses


def revisions(job: LoadJob, statuses: list[HourStatus]) -> dict[tuple[str, str, str], int]:
    """(topic, dt, hr) -> the hour's revision: how many times its table was published again with another row
    count, counting the republication these books call for (complete now, published before with other rows)."""
    from ferry.loaders.naming import table_for_topic

    out = {}
    for s in statuses:
        table = f"{job.config.database}.{table_for_topic(s.topic)}"
        hour = f"{s.dt}T{s.hr}"
        rev = job.ledger.revision(table, hour)
        published = job.ledger.published_hours(table).get(hour)
        if s.complete and published is not None and published != s.loaded:
            rev += 1
        out[(s.topic, s.dt, s.hr)] = rev
    return out


def write_statuses(job: LoadJob, statuses: list[HourStatus]) -> None:
    from ferry.loaders.load_config import new_run_id

    spark, wh = job.spark, job.warehouse
    wh.ensure_table(COMPLETENESS_TABLE, completeness_columns(), with_meta=False)
    if _unchanged(job, statuses):
        return
    now = dt.datetime.now(dt.UTC)
    rev = revisions(job, statuses)
    data = [(s.topic, dt.datetime.fromtimestamp(s.hour_ms / 1000, dt.UTC), s.produced, s.mirrored, s.loaded,
             s.missing, s.duplicates, s.complete, s.status, now, rev[(s.topic, s.dt, s.hr)], s.dt, s.hr)
            for s in statuses]
    schema = wh.table_schema(COMPLETENESS_TABLE)
    df = spark.createDataFrame(data, schema)
    topics = sorted({s.topic for s in statuses})
    keep = "topic NOT IN (" + ", ".join("'" + t.replace("'", "''") + "'" for t in topics) + ")"
    run_id = "c" + new_run_id()
    root = wh.table_root(COMPLETENESS_TABLE)
    with job.ledger.lock(job.config.lock_timeout_s) if job.ledger._lock_fd is None else nullcontext():
        job.ledger.begin(run_id, [root])
        versions = wh.write_versions(COMPLETENESS_TABLE, df, {(s.dt, s.hr) for s in statuses}, [], run_id,
                                     keep_old=keep)
        for v in versions:
            wh.set_partition(v)
        wh.refresh(COMPLETENESS_TABLE)
        job.ledger.mark_applied(run_id, [v.previous for v in versions if v.previous])
        job.ledger.abandon(run_id)



def _key(topic, d, h, produced, mirrored, loaded, missing, duplicates, complete, status, revision) -> tuple:
    return (topic, d, h, int(produced), int(mirrored), int(loaded), int(missing), int(duplicates), bool(complete),
            status, int(revision or 0))


def _unchanged(job: LoadJob, statuses: list[HourStatus]) -> bool:
    """True when ferry_completeness already holds exactly these books (a rerun then writes nothing)."""
    from pyspark.sql import functions as F

    wh = job.warehouse
    topics = sorted({s.topic for s in statuses})
    rows = (job.spark.table(wh.qualified(COMPLETENESS_TABLE))
            .where(hours_filter({(s.dt, s.hr) for s in statuses})).where(F.col("topic").isin(topics))
            .select("topic", "dt", "hr", "produced", "mirrored", "loaded", "missing", "duplicates", "complete",
                    "status", "revision").collect())
    have = sorted(_key(*r) for r in rows)
    rev = revisions(job, statuses)
    want = sorted(_key(s.topic, s.dt, s.hr, s.produced, s.mirrored, s.loaded, s.missing, s.duplicates, s.complete,
                       s.status, rev[(s.topic, s.dt, s.hr)]) for s in statuses)
    return have == want
