"""An hour is complete only when the live datacenters' producers say so (issue 15), with real processes:
ZooKeeper, two live clusters and one offline cluster (broker processes), a mirror process per live
cluster, Spark and Airflow's ``dag.test()``.

- a mirror stopped mid-hour: the offline books balance (the producers' counts are held back with the
  data) but the live counts do not, so check_complete fails naming what is missing and nothing is
  published; the mirror restarted, the rerun publishes the hour once, complete;
- two live datacenters feed one offline cluster: complete only when both sides' counts are loaded;
- late data for a published hour: republished, marked revised in the Asset event and the table;
- a live datacenter unreachable: the hour is "unknown", never complete, and nothing is (re)published.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid

import pytest

from tests.dags.test_dag_run import _asset_events, _states
from tests.loaders.conftest import Offline, label, past_hour, produce, spread
from tests.mirror.mirror_harness import MirrorProcess, committed_to_end, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _caught_up(live_zk: str, offline_zk: str, topics: list[str]) -> bool:
    from ferry.mirror.status import mirror_status

    try:
        return committed_to_end(mirror_status(live_zk, offline_zk, "ferry-mirror"), topics)
    except Exception:  # noqa: BLE001 - not yet registered: keep waiting
        return False


def test_live_counts_decide_completeness(airflow_db, cluster_factory, tmp_path):
    from pyspark.sql import SparkSession

    from ferry.loaders.ledger import Ledger
    from ferry.zk import ClusterRegistry

    tag = uuid.uuid4().hex[:8]
    topic = f"views_{tag}"
    live_a, live_b = cluster_factory(1, "live"), cluster_factory(1, "live")
    offline_cluster = cluster_factory(1, "offline")
    lives = [Offline(c.zk_connect, next(iter(c.brokers.values()))) for c in (live_a, live_b)]
    offline = Offline(offline_cluster.zk_connect, next(iter(offline_cluster.brokers.values())))
    for side in (*lives, offline):
        with ClusterRegistry(side.zk) as reg:
            reg.create_topic("_audit", 1)
            reg.create_topic(topic, 2)
    include = f"{topic}|_audit"
    mirrors = [MirrorProcess(tmp_path / f"mirror-{i}.log", side.zk, offline.zk, include,
                             "--group", "ferry-mirror", "--commit-interval", "0.5").start()
               for i, side in enumerate(lives)]
    hour = past_hour(3)
    # live A: 300 events; live B: 200 events mirrored, then its mirror stops and 150 more are produced
    a = produce(lives[0], topic, spread(hour, 300))
    b1 = produce(lives[1], topic, spread(hour, 200))
    for side in lives:
        wait_for(lambda side=side: _caught_up(side.zk, offline.zk, [topic, "_audit"]), 120, "the mirror")
    mirrors[1].stop()
    b2 = produce(lives[1], topic, spread(hour + 1_800_000, 150, 600_000))
    produced = a + b1 + b2

    database = f"d_{tag}"
    config = tmp_path / "ferry_dags.yaml"
    config.write_text(
        f"defaults:\n  zookeeper: '{offline.zk}'\n  state_dir: '{tmp_path / 'state'}'\n"
        f"  warehouse: '{tmp_path / 'warehouse'}'\n  database: {database}\n  lateness_minutes: 0\n"
        f"  check_poke_s: 1\n  retries: 0\n"
        f"  live_zookeepers: ['{lives[0].zk}', '{lives[1].zk}']\n"
        f"groups:\n  - name: g_{tag}\n    topics: [{topic}]\n")
    os.environ["FERRY_DAGS_CONFIG"] = str(config)
    try:
        from ferry_dag_factory import build_dag, load_config

        cfg = load_config(config)[0]
        dag = build_dag(cfg)
        logical = dt.datetime.fromtimestamp(hour / 1000, dt.UTC) + dt.timedelta(hours=1)
        d, h = label(hour)
        uri = f"ferry://warehouse/{database}/{topic}"

        # 1. mirror B stopped mid-hour: offline books alone would balance (a + b1), the live ones do not
        dr = dag.test(logical_date=logical)
        states = _states(dr)
        assert states["check_complete"] == "failed" and states[f"publish_{topic}"] == "skipped", states
        assert _asset_events(uri) == []
        spark = SparkSession.getActiveSession() or SparkSession._instantiatedSession
        row = spark.sql(f"SELECT produced, loaded, missing, status, completeness FROM {database}.ferry_completeness "
                        f"WHERE dt='{d}' AND hr='{h}'").collect()
        assert [tuple(r) for r in row] == [(produced, a + b1, b2, "incomplete", "live")]

        # 2. mirror B back: the rerun loads the rest and publishes the hour once, complete
        mirrors[1] = MirrorProcess(tmp_path / "mirror-1b.log", lives[1].zk, offline.zk, include,
                                   "--group", "ferry-mirror", "--commit-interval", "0.5").start()
        wait_for(lambda: _caught_up(lives[1].zk, offline.zk, [topic, "_audit"]), 120, "mirror B again")
        dr = dag.test(logical_date=logical)
        states = _states(dr)
        assert set(states.values()) == {"success"}, states
        events = _asset_events(uri)
        assert len(events) == 1 and events[0]["hours"] == [f"{d}T{h}"] and events[0]["revised"] == []
        assert events[0]["rows"] == {f"{d}T{h}": produced} and events[0]["completeness"] == "live"
        n = spark.sql(f"SELECT count(*) FROM {database}.{topic} WHERE dt='{d}' AND hr='{h}'").collect()[0][0]
        assert n == produced
        assert Ledger(cfg.state_dir).published_hours(f"{database}.{topic}") == {f"{d}T{h}": produced}

        # 3. late data for the published hour: republished once more, marked revised (event and table)
        late = produce(lives[0], topic, spread(hour + 3_000_000, 40, 60_000))
        wait_for(lambda: _caught_up(lives[0].zk, offline.zk, [topic, "_audit"]), 120, "mirror A (late data)")
        dr = dag.test(logical_date=logical)
        assert set(_states(dr).values()) == {"success"}, _states(dr)
        events = _asset_events(uri)
        assert len(events) == 2 and events[1]["revised"] == [f"{d}T{h}"]
        assert events[1]["rows"] == {f"{d}T{h}": produced + late} and events[1]["revision"] == {f"{d}T{h}": 1}
        row = spark.sql(f"SELECT loaded, status, revision FROM {database}.ferry_completeness "
                        f"WHERE dt='{d}' AND hr='{h}'").collect()
        assert [tuple(r) for r in row] == [(produced + late, "complete", 1)]

        # 4. live B unreachable (its broker gone): "unknown", never complete, nothing published again
        for m in mirrors:
            m.stop()
        live_b.stop()
        dr = dag.test(logical_date=logical)
        states = _states(dr)
        assert states["check_complete"] == "failed" and states[f"publish_{topic}"] == "skipped", states
        assert len(_asset_events(uri)) == 2
        row = spark.sql(f"SELECT status, complete FROM {database}.ferry_completeness "
                        f"WHERE dt='{d}' AND hr='{h}'").collect()
        assert [tuple(r) for r in row] == [("unknown", False)]
    finally:
        os.environ.pop("FERRY_DAGS_CONFIG", None)
        for m in mirrors:
            m.stop()
