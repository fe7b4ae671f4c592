"""``ferry_completeness``: one row per topic and hour saying whether the warehouse has every message.

The producers' counts that decide are the live clusters' own (``LoadConfig.live_zookeepers``, read directly
and merged by guid with ``ferry_audit``); :func:`ferry.audit.completeness.books` decides each status.
``revision`` counts how often an hour was published again with another row count (late data).
``completeness`` says what the status was judged from: ``live`` (the live clusters' producer counts) or
``offline-only`` (a load given no live cluster: only the counts that reached the offline cluster, which a
stopped mirror holds back with the data, so such a "complete" is weaker and marked).

Rows are derived (recomputed from ``ferry_audit`` whenever an hour is evaluated again, e.g. after late
data), so the table is written with the same versioned-partition swap as the data tables but outside the
ledger: a re-evaluation replaces the hour's rows for the topics it evaluated and keeps the others.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ferry.audit.completeness import HourStatus, books
from ferry.audit.live import read_live_counts
from ferry.client.audit.event import AuditEvent
from ferry.loaders.ledger import Ledger
from ferry.loaders.load_config import new_run_id
from ferry.loaders.naming import AUDIT_TABLE, COMPLETENESS_TABLE, table_for_topic
from ferry.loaders.warehouse import Warehouse, hours_filter
from ferry.loaders.warehouse_audit import event_from_dict
from ferry.wire.client_config import ClientConfig

AUDIT_FIELDS = ("guid", "topic", "tier", "bucket_start", "bucket_end", "count", "host", "datacenter",
                "application", "time")
COMPLETENESS_COLUMNS = [
    ("topic", T.StringType()), ("hour_start", T.TimestampType()), ("produced", T.LongType()),
    ("mirrored", T.LongType()), ("loaded", T.LongType()), ("missing", T.LongType()), ("duplicates", T.LongType()),
    ("complete", T.BooleanType()), ("status", T.StringType()), ("evaluated_at", T.TimestampType()),
    ("revision", T.IntegerType()), ("completeness", T.StringType())]


class CompletenessBooks:
    """The books of (topic, hour)s, balanced from ``ferry_audit`` and the live clusters' producer counts, and
    kept in ``ferry_completeness``. The ledger holds the hours' publications (the revision of an hour)
    and serializes this table's versions with the loads'."""

    def __init__(self, spark: SparkSession, warehouse: Warehouse, ledger: Ledger, *, database: str,
                 lock_timeout_s: float, live_zookeepers: list[str], live_timeout_s: float,
                 live_client_config: ClientConfig | None = None) -> None:
        self.spark, self.warehouse, self.ledger = spark, warehouse, ledger
        self.database = database  # as the ledger names published tables (the configured spelling)
        self.lock_timeout_s = lock_timeout_s
        self.live_zookeepers, self.live_timeout_s = live_zookeepers, live_timeout_s
        self.live_client_config = live_client_config  # TLS/SASL towards the live clusters' brokers

    def reconcile(self, topics: list[str], hours: list[tuple[str, str]]) -> list[HourStatus]:
        """Books for every (topic, hour); writes them to ferry_completeness and returns them."""
        hours = sorted(set(hours))
        topics = sorted(set(topics) - {"_audit"})
        if not hours or not topics:
            return []
        events = self.audit_events(hours)
        unreachable: list[str] = []
        if self.live_zookeepers:
            live = read_live_counts(self.live_zookeepers, self.live_timeout_s, self.live_client_config)
            events.extend(live.events)
            unreachable = live.unreachable
        statuses = books(events, topics, hours, unreachable=unreachable, offline_only=not self.live_zookeepers)
        self.write(statuses)
        return statuses

    def audit_events(self, hours: list[tuple[str, str]]) -> list[AuditEvent]:
        """The audit events of ``hours`` loaded into ferry_audit."""
        wh = self.warehouse
        if not hours or not wh.exists_table(AUDIT_TABLE):
            return []
        rows = (self.spark.table(wh.qualified(AUDIT_TABLE)).where(hours_filter(hours))
                .select(*AUDIT_FIELDS).collect())
        return [event_from_dict(r.asDict()) for r in rows]

    def revisions(self, statuses: list[HourStatus]) -> dict[tuple[str, str, str], int]:
        """(topic, dt, hr) -> the hour's revision: how many times its table was published again with another
        row count, counting the republication these books call for (complete now, published before with
        other rows)."""
        out = {}
        for s in statuses:
            table = f"{self.database}.{table_for_topic(s.topic)}"
            hour = f"{s.dt}T{s.hr}"
            rev = self.ledger.revision(table, hour)
            published = self.ledger.published_hours(table).get(hour)
            if s.complete and published is not None and published != s.loaded:
                rev += 1
            out[(s.topic, s.dt, s.hr)] = rev
        return out

    def write(self, statuses: list[HourStatus]) -> None:
        """Replace the hours' rows of these topics in ferry_completeness (other topics' rows stay), unless
        the table holds exactly these books already."""
        wh = self.warehouse
        wh.ensure_table(COMPLETENESS_TABLE, COMPLETENESS_COLUMNS, with_meta=False)
        rev = self.revisions(statuses)
        if self._unchanged(statuses, rev):
            return
        now = dt.datetime.now(dt.UTC)
        data = [(s.topic, dt.datetime.fromtimestamp(s.hour_ms / 1000, dt.UTC), s.produced, s.mirrored, s.loaded,
                 s.missing, s.duplicates, s.complete, s.status, now, rev[(s.topic, s.dt, s.hr)], s.completeness,
                 s.dt, s.hr)
                for s in statuses]
        df = self.spark.createDataFrame(data, wh.table_schema(COMPLETENESS_TABLE))
        topics = sorted({s.topic for s in statuses})
        keep = "topic NOT IN (" + ", ".join("'" + t.replace("'", "''") + "'" for t in topics) + ")"
        run_id = "c" + new_run_id()
        with self.ledger.lock_unless_held(self.lock_timeout_s):
            self.ledger.begin(run_id, [wh.table_root(COMPLETENESS_TABLE)])
            versions = wh.write_versions(COMPLETENESS_TABLE, df, {(s.dt, s.hr) for s in statuses}, [], run_id,
                                         keep_old=keep)
            wh.set_partitions(versions)
            wh.refresh(COMPLETENESS_TABLE)
            self.ledger.mark_applied(run_id, [v.previous for v in versions if v.previous])
            self.ledger.abandon(run_id)

    def _unchanged(self, statuses: list[HourStatus], rev: dict[tuple[str, str, str], int]) -> bool:
        """True when ferry_completeness already holds exactly these books (a rerun then writes nothing)."""
        wh = self.warehouse
        topics = sorted({s.topic for s in statuses})
        rows = (self.spark.table(wh.qualified(COMPLETENESS_TABLE))
                .where(hours_filter({(s.dt, s.hr) for s in statuses})).where(F.col("topic").isin(topics))
                .select("topic", "dt", "hr", "produced", "mirrored", "loaded", "missing", "duplicates", "complete",
                        "status", "revision", "completeness").collect())
        have = sorted(_key(*r) for r in rows)
        want = sorted(_key(s.topic, s.dt, s.hr, s.produced, s.mirrored, s.loaded, s.missing, s.duplicates,
                           s.complete, s.status, rev[(s.topic, s.dt, s.hr)], s.completeness) for s in statuses)
        return have == want


def _key(topic, d, h, produced, mirrored, loaded, missing, duplicates, complete, status, revision,
         completeness) -> tuple:
    return (topic, d, h, int(produced), int(mirrored), int(loaded), int(missing), int(duplicates), bool(complete),
            status, int(revision or 0), completeness or "")
