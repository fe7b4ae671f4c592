"""``dag.test()`` runs a real generated DAG for one logical hour: real broker, ZooKeeper, Spark and Airflow
(SQLite metadata DB under a temporary AIRFLOW_HOME)."""

from __future__ import annotations

import datetime as dt
import os
import uuid

import pytest

from tests.loaders.conftest import Offline, label, past_hour, produce, spread

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _states(dr) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}


def _asset_events(uri: str) -> list[dict]:
    from airflow import settings
    from airflow.models.asset import AssetEvent, AssetModel
    from sqlalchemy import select

    with settings.Session() as session:
        rows = session.execute(select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                               .where(AssetModel.uri == uri)).scalars().all()
        return [dict(e.extra or {}) for e in rows]


def test_dag_runs_one_hour_end_to_end_and_a_rerun_changes_nothing(airflow_db, cluster_factory, tmp_path):
    from ferry.zk import ClusterRegistry

    cluster = cluster_factory(1, datacenter="offline")
    offline = Offline(cluster.zk_connect, next(iter(cluster.brokers.values())))
    tag = uuid.uuid4().hex[:8]
    topics = [f"views_{tag}", f"clicks_{tag}"]
    with ClusterRegistry(offline.zk) as reg:
        reg.create_topic("_audit", 1)
        for t in topics:
            reg.create_topic(t, 2)
    hour = past_hour(3)
    produced = {topics[0]: produce(offline, topics[0], spread(hour, 400)),
                topics[1]: produce(offline, topics[1], spread(hour + 600_000, 150, 1_800_000))}
    # a few events of the next hour: loaded too, but this run judges and publishes only complete hours
    produce(offline, topics[0], spread(hour + 3_600_000, 20, 60_000))

    database = f"d_{tag}"
    config = tmp_path / "ferry_dags.yaml"
    config.write_text(
        f"defaults:\n  zookeeper: '{offline.zk}'\n  state_dir: '{tmp_path / 'state'}'\n"
        f"  warehouse: '{tmp_path / 'warehouse'}'\n  database: {database}\n  lateness_minutes: 60\n"
        f"  retries: 1\n  retry_delay_s: 5\n  max_per_split: 250\n"
        f"  completeness: offline-only\n"  # one cluster here: the producers' counts are the offline ones
        f"groups:\n  - name: g_{tag}\n    topics: [{', '.join(topics)}]\n")
    os.environ["FERRY_DAGS_CONFIG"] = str(config)
    try:
        from ferry_dag_factory import build_dag, load_config

        cfg = load_config(config)[0]
        dag = build_dag(cfg)
        logical = dt.datetime.fromtimestamp(hour / 1000, dt.UTC) + dt.timedelta(hours=1)

        dr = dag.test(logical_date=logical)
        states = _states(dr)
        assert str(dr.state) == "success", states
        assert set(states.values()) == {"success"}, states

        from pyspark.sql import SparkSession

        from ferry.loaders.ledger import Ledger

        spark = SparkSession.getActiveSession() or SparkSession._instantiatedSession
        d, h = label(hour)
        for t in topics:
            n = spark.sql(f"SELECT count(*) FROM {database}.{t} WHERE dt='{d}' AND hr='{h}'").collect()[0][0]
            assert n == produced[t]
        books = spark.sql(f"SELECT topic, produced, loaded, missing, complete, completeness "
                          f"FROM {database}.ferry_completeness WHERE dt='{d}' AND hr='{h}'").collect()
        # judged without any live cluster's counts: every row says so
        assert sorted(tuple(r) for r in books) == sorted((t, produced[t], produced[t], 0, True, "offline-only")
                                                         for t in topics)
        ledger = Ledger(cfg.state_dir)
        for t in topics:
            assert f"{d}T{h}" in ledger.published_hours(f"{database}.{t}")
            events = _asset_events(f"ferry://warehouse/{database}/{t}")
            assert len(events) == 1 and f"{d}T{h}" in events[0]["hours"]
            assert events[0]["completeness"] == "offline-only", events[0]  # said on every hour it publishes
        seq = ledger.read()["seq"]
        locations = {t: spark.sql(f"DESCRIBE FORMATTED {database}.{t} PARTITION (dt='{d}', hr='{h}')")
                     .where("col_name = 'Location'").collect()[0].data_type for t in topics}

        # the same interval again: nothing changes (no new rows, versions, books, ledger state, asset events)
        dr2 = dag.test(logical_date=logical)
        states2 = _states(dr2)
        assert str(dr2.state) == "success", states2
        assert {states2[f"publish_{t}"] for t in topics} == {"skipped"}
        assert Ledger(cfg.state_dir).read()["seq"] == seq
        for t in topics:
            loc = spark.sql(f"DESCRIBE FORMATTED {database}.{t} PARTITION (dt='{d}', hr='{h}')") \
                .where("col_name = 'Location'").collect()[0].data_type
            assert loc == locations[t]
            assert len(_asset_events(f"ferry://warehouse/{database}/{t}")) == 1
    finally:
        os.environ.pop("FERRY_DAGS_CONFIG", None)


def test_dag_with_a_spark_connection_runs_spark_submit(airflow_db, cluster_factory, tmp_path, monkeypatch):
    """The same hour through SparkSubmitOperator (spark-submit on a `spark` connection to local[2])."""
    import sys
    from pathlib import Path

    import pyarrow.parquet as pq

    from ferry.loaders.ledger import Ledger
    from ferry.zk import ClusterRegistry

    cluster = cluster_factory(1, datacenter="offline")
    offline = Offline(cluster.zk_connect, next(iter(cluster.brokers.values())))
    tag = uuid.uuid4().hex[:8]
    topic = f"subm_{tag}"
    with ClusterRegistry(offline.zk) as reg:
        reg.create_topic("_audit", 1)
        reg.create_topic(topic, 2)
    hour = past_hour(4)
    n = produce(offline, topic, spread(hour, 250))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", '{"conn_type": "spark", "host": "local[2]"}')
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    database = f"s_{tag}"
    config = tmp_path / "ferry_dags.yaml"
    config.write_text(
        f"defaults:\n  zookeeper: '{offline.zk}'\n  state_dir: '{tmp_path / 'state'}'\n"
        f"  warehouse: '{tmp_path / 'warehouse'}'\n  database: {database}\n  lateness_minutes: 60\n"
        f"  retries: 0\n  spark_conn_id: spark_local\n  spark_conf: {{spark.ui.showConsoleProgress: 'false'}}\n"
        f"  completeness: offline-only\n"
        f"groups:\n  - name: s_{tag}\n    topics: [{topic}]\n")
    monkeypatch.setenv("FERRY_DAGS_CONFIG", str(config))
    from ferry_dag_factory import build_dag, load_config

    cfg = load_config(config)[0]
    dag = build_dag(cfg)
    assert type(dag.get_task("load")).__name__ == "SparkSubmitOperator"
    logical = dt.datetime.fromtimestamp(hour / 1000, dt.UTC) + dt.timedelta(hours=1)
    dr = dag.test(logical_date=logical)
    states = _states(dr)
    assert str(dr.state) == "success" and set(states.values()) == {"success"}, states

    d, h = label(hour)
    versions = list((tmp_path / "warehouse" / database / topic).glob(f"dt={d}/hr={h}/ferry_run=*"))
    assert len(versions) == 1
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in versions[0].glob("*.parquet")) == n
    ledger = Ledger(cfg.state_dir)
    assert ledger.published_hours(f"{database}.{topic}") == {f"{d}T{h}": n}
    assert len(_asset_events(f"ferry://warehouse/{database}/{topic}")) == 1
    seq = ledger.read()["seq"]

    dr2 = dag.test(logical_date=logical)
    states2 = _states(dr2)
    assert str(dr2.state) == "success" and states2[f"publish_{topic}"] == "skipped", states2
    assert Ledger(cfg.state_dir).read()["seq"] == seq
    assert len(list((tmp_path / "warehouse" / database / topic).glob(f"dt={d}/hr={h}/ferry_run=*"))) == 1
