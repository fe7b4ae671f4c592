"""End-to-end loads with real Spark (local mode), a real broker and ZooKeeper: counts, audit, reruns,
late data, schema evolution, bad records."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from ferry.loaders import steps
from ferry.loaders.datasource import FerryDataSource, FerryReader
from ferry.loaders.ledger import Ledger
from ferry.loaders.load_config import BadRecordsError
from ferry.loaders.load_job import LoadJob

pytestmark = [pytest.mark.spark, pytest.mark.slow]


# ---- fault injection (from the test side: the product classes have no test switches)

class FailingReader(FerryReader):
    """The ferry source's reader, except that every split raises once it has read ``failAfterRecords``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.fail_after = int({k.lower(): v for k, v in options.items()}["failafterrecords"])

    def records(self, partition, *args, **kwargs):
        read = 0
        for batch in super().records(partition, *args, **kwargs):
            read += batch.num_rows
            if read >= self.fail_after:
                raise RuntimeError(f"{partition}: injected failure after {read} records")
            yield batch


class FailingSource(FerryDataSource):
    @classmethod
    def name(cls) -> str:
        return "ferry_failing"

    def reader(self, schema) -> FailingReader:
        return FailingReader(dict(self.options))


class SplitFails(LoadJob):
    """A load whose Spark tasks fail halfway through reading (on the executors)."""

    def source(self, ranges, bootstrap):
        from pyspark import cloudpickle

        spark = self.spark
        if not getattr(spark, "_ferry_failing_registered", False):
            cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import this module
            spark.dataSource.register(FailingSource)
            spark._ferry_failing_registered = True
        smallest = min(min(r.size, self.config.max_per_split) for r in ranges)  # every split fails halfway
        return (super().source(ranges, bootstrap).format(FailingSource.name())
                .option("failAfterRecords", str(max(1, smallest // 2))))


class CommitFails(Ledger):
    """The run dies at its commit point: just before the ledger write, or right after it."""

    def __init__(self, state_dir: str, after: bool) -> None:
        super().__init__(state_dir)
        self.after = after

    def commit(self, record: dict[str, Any]) -> None:
        if self.after:
            super().commit(record)
        raise RuntimeError(f"injected failure {'after' if self.after else 'before'} the ledger commit")


def commit_fails(cfg, spark, after: bool) -> LoadJob:
    job = LoadJob(cfg, spark)
    job.ledger = CommitFails(cfg.state_dir, after)
    return job


def table_counts(spark, cfg, table: str) -> dict[tuple[str, str], int]:
    rows = spark.sql(f"SELECT dt, hr, count(*) AS n FROM {cfg.database}.{table} GROUP BY dt, hr").collect()
    return {(r.dt, r.hr): r.n for r in rows}


def assert_no_duplicates(spark, cfg, table: str) -> int:
    r = spark.sql(f"SELECT count(*) AS n, count(DISTINCT _topic, _partition, _offset) AS d "
                  f"FROM {cfg.database}.{table}").collect()[0]
    assert r.n == r.d, f"{r.n - r.d} duplicate rows in {table}"
    return r.n


def completeness(spark, cfg, topic: str) -> dict[tuple[str, str], tuple]:
    rows = spark.sql(f"SELECT dt, hr, produced, loaded, missing, duplicates, complete "
                     f"FROM {cfg.database}.ferry_completeness WHERE topic = '{topic}'").collect()
    return {(r.dt, r.hr): (r.produced, r.loaded, r.missing, r.duplicates, r.complete) for r in rows}


def test_two_hours_load_counts_audit_and_idempotent_rerun(spark, offline, load_config, helpers):
    topic = helpers.create_topic(offline)
    h0, h1 = helpers.past_hour(3), helpers.past_hour(2)
    produced = {helpers.label(h0): helpers.produce(offline, topic, helpers.spread(h0, 700)),
                helpers.label(h1): helpers.produce(offline, topic, helpers.spread(h1, 500))}
    cfg = load_config(topic)

    result, statuses = steps.load_and_reconcile(cfg, spark)

    assert result.committed and result.rows == 1200
    assert table_counts(spark, cfg, topic) == produced
    assert assert_no_duplicates(spark, cfg, topic) == 1200
    books = {(s.dt, s.hr): s for s in statuses if s.topic == topic}
    for hour, n in produced.items():
        s = books[hour]
        assert (s.produced, s.loaded, s.missing, s.duplicates, s.complete) == (n, n, 0, 0, True), s.describe()
    assert completeness(spark, cfg, topic) == {h: (n, n, 0, 0, True) for h, n in produced.items()}
    # typed columns from the Avro schema, plus ferry's
    row = spark.sql(f"SELECT * FROM {cfg.database}.{topic} WHERE member_id IS NOT NULL LIMIT 1").collect()[0]
    assert isinstance(row.guid, str) and len(row.guid) == 36
    assert row.tags[0] == "a" and row.attrs["i"] == row.member_id
    assert row._topic == topic and row._event_time is not None and row.event_time == row._event_time

    # a rerun with nothing new changes nothing: same ledger, same partition versions, same books
    ledger = Ledger(cfg.state_dir)
    before = (ledger.read()["offsets"], ledger.read()["seq"])
    wh = LoadJob(cfg, spark).warehouse
    locations = {h: wh.partition_location(topic, *h) for h in produced}
    again, statuses2 = steps.load_and_reconcile(cfg, spark)
    assert not again.committed and again.rows == 0
    assert (ledger.read()["offsets"], ledger.read()["seq"]) == before
    assert {h: wh.partition_location(topic, *h) for h in produced} == locations
    assert table_counts(spark, cfg, topic) == produced


def test_failed_runs_leave_nothing_and_rerun_neither_loses_nor_duplicates(spark, offline, load_config, helpers):
    topic = helpers.create_topic(offline)
    h0 = helpers.past_hour(4)
    helpers.produce(offline, topic, helpers.spread(h0, 900, 2 * helpers.HOUR_MS))
    cfg = load_config(topic)
    ledger = Ledger(cfg.state_dir)

    # 1. a task fails while reading: nothing committed, nothing visible
    with pytest.raises(Exception, match="injected failure"):
        SplitFails(cfg, spark).run()
    assert ledger.committed_offsets() == {} and ledger.pending() == []
    job = LoadJob(cfg, spark)
    assert job.warehouse.partitions(topic) == []

    # 2. the run dies after writing its partition versions, before the ledger commit
    with pytest.raises(RuntimeError, match="before the ledger commit"):
        commit_fails(cfg, spark, after=False).run()
    orphans = job.warehouse.orphan_versions(topic, next(iter(ledger.in_flight())))
    assert orphans, "the failed run wrote version directories"
    assert job.warehouse.partitions(topic) == []  # ...that nobody can see
    assert ledger.committed_offsets() == {}

    # 3. the run dies right after the ledger commit, before publishing: the next run re-applies it
    with pytest.raises(RuntimeError, match="after the ledger commit"):
        commit_fails(cfg, spark, after=True).run()
    assert all(not job.warehouse.exists(p) for p in orphans), "files of the uncommitted run were removed"
    assert len(ledger.pending()) == 1
    assert sum(n for (t, _), n in ledger.committed_offsets().items() if t == topic) == 900

    result, statuses = steps.load_and_reconcile(cfg, spark)
    assert ledger.pending() == [] and result.rows == 0  # nothing new, but the redo step published it
    assert assert_no_duplicates(spark, cfg, topic) == 900
    assert all(s.complete for s in statuses if s.topic == topic), [s.describe() for s in statuses]

    # more data after the failures: still exact
    helpers.produce(offline, topic, helpers.spread(h0 + helpers.HOUR_MS, 100))
    steps.load_and_reconcile(cfg, spark)
    assert assert_no_duplicates(spark, cfg, topic) == 1000


def test_late_events_land_in_their_hour_and_reopen_its_books(spark, offline, load_config, helpers):
    topic = helpers.create_topic(offline)
    early, late = helpers.past_hour(5), helpers.past_hour(1)
    helpers.produce(offline, topic, helpers.spread(early, 300))
    helpers.produce(offline, topic, helpers.spread(late, 200))
    cfg = load_config(topic)
    steps.load_and_reconcile(cfg, spark)
    wh = LoadJob(cfg, spark).warehouse
    late_location = wh.partition_location(topic, *helpers.label(late))

    # 40 events of the early hour arrive late: the books of that hour are open until they are loaded
    helpers.produce(offline, topic, helpers.spread(early + 60_000, 40, 600_000))
    _, statuses = steps.reconcile(cfg, [helpers.label(early)], spark=spark)
    s = next(s for s in statuses if (s.topic, s.dt, s.hr) == (topic, *helpers.label(early)))
    assert (s.produced, s.loaded, s.missing, s.complete) == (340, 300, 40, False)

    result, statuses = steps.load_and_reconcile(cfg, spark)
    assert next(t for t in result.topics if t.topic == topic).hours == [helpers.label(early)]
    assert table_counts(spark, cfg, topic) == {helpers.label(early): 340, helpers.label(late): 200}
    s = next(s for s in statuses if (s.topic, s.dt, s.hr) == (topic, *helpers.label(early)))
    assert (s.produced, s.loaded, s.missing, s.complete) == (340, 340, 0, True)
    assert completeness(spark, cfg, topic)[helpers.label(early)] == (340, 340, 0, 0, True)
    assert wh.partition_location(topic, *helpers.label(late)) == late_location  # untouched hour kept its files


def test_compatible_schema_change_adds_a_nullable_column(spark, offline, load_config, helpers):
    topic = helpers.create_topic(offline, partitions=1)
    h = helpers.past_hour(2)
    helpers.produce(offline, topic, helpers.spread(h, 100))
    cfg = load_config(topic)
    steps.load(cfg, spark)

    v2 = dict(helpers.PAGE_VIEW)
    v2["fields"] = helpers.PAGE_VIEW["fields"] + [{"name": "referrer", "type": ["null", "string"], "default": None}]
    helpers.produce(offline, topic, helpers.spread(h + 1_000, 50, 60_000), schema=v2, extra={"referrer": "/feed"})
    steps.load(cfg, spark)

    rows = spark.sql(f"SELECT referrer, count(*) AS n FROM {cfg.database}.{topic} GROUP BY referrer").collect()
    assert {r.referrer: r.n for r in rows} == {None: 100, "/feed": 50}
    assert "referrer" in [c.name for c in spark.table(f"{cfg.database}.{topic}").schema]

    bad = dict(helpers.PAGE_VIEW)
    bad["fields"] = [dict(f, type="string", default="") if f["name"] == "member_id" else f
                     for f in helpers.PAGE_VIEW["fields"]]
    from ferry.schemas.registry import SchemaRegistry

    with SchemaRegistry(offline.zk) as reg:
        reg.set_compatibility("NONE", topic)
    helpers.produce(offline, topic, [h + 5_000], schema=bad, extra={"member_id": "x"})
    with pytest.raises(Exception, match="incompatible schema change for column 'member_id'"):
        steps.load(cfg, spark)
    assert assert_no_duplicates(spark, cfg, topic) == 150


def test_bad_records_fail_the_run_unless_skipped(spark, offline, load_config, helpers):
    from ferry.client.producer import Producer

    topic = helpers.create_topic(offline, partitions=1)
    h = helpers.past_hour(2)
    helpers.produce(offline, topic, helpers.spread(h, 20))
    with Producer(bootstrap=offline.bootstrap, audit=False) as p:
        p.send(topic, b"not avro at all", timestamp_ms=h + 10)
    helpers.produce(offline, topic, helpers.spread(h + 100, 10, 1000))
    cfg = load_config(topic)
    with pytest.raises(BadRecordsError, match=rf"{topic}/0@20: .*magic byte"):
        steps.load(cfg, spark)
    assert Ledger(cfg.state_dir).committed_offsets().get((topic, 0)) is None

    from dataclasses import replace

    _, result = steps.load(replace(cfg, skip_bad_records=True), spark)
    mine = next(t for t in result.topics if t.topic == topic)
    assert mine.bad == 1 and result.rows == 30
    assert Ledger(cfg.state_dir).committed_offsets()[(topic, 0)] == 31


class Recording(LoadJob):
    """A load that keeps the run record it applies (to read the warehouse audit counts it published)."""

    def apply(self, record: dict[str, Any]) -> int:
        self.record = record
        return super().apply(record)


def test_reloading_a_range_replaces_its_rows_and_counts_only_new_ones(spark, offline, load_config, helpers):
    """Committed offsets moved back (Ledger.reset_offsets): the next run re-loads the range, its old rows
    are replaced (never duplicated) and the warehouse audit tier counts only the rows that are new."""
    import json

    topic = helpers.create_topic(offline, partitions=1)
    h = helpers.past_hour(2)
    helpers.produce(offline, topic, helpers.spread(h, 100))
    cfg = load_config(topic, include_audit=False)
    steps.load(cfg, spark)
    ledger = Ledger(cfg.state_dir)
    with ledger.lock():
        ledger.reset_offsets({(topic, 0): 40})
    helpers.produce(offline, topic, helpers.spread(h + 1_000, 10, 60_000))
    job = Recording(cfg, spark)
    result = job.run()
    assert result.rows == 70  # 60 again, 10 new
    assert assert_no_duplicates(spark, cfg, topic) == 110
    assert sum(json.loads(e)["count"] for e in job.record["audit"]) == 10
    assert ledger.loaded_to()[(topic, 0)] == 110
