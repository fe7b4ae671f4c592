"""The DAG files parse: every generated DAG imports cleanly and has the promised shape."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from tests.dags.conftest import DAGS


def _bag(config: str | None):
    from airflow.dag_processing.dagbag import DagBag

    if config is None:
        os.environ.pop("FERRY_DAGS_CONFIG", None)
    else:
        os.environ["FERRY_DAGS_CONFIG"] = config
    try:
        return DagBag(dag_folder=str(DAGS))
    finally:
        os.environ.pop("FERRY_DAGS_CONFIG", None)


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_every_dag_imports_without_errors():
    bag = _bag(None)
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"ferry_load_activity", "ferry_load_search"}
    dag = bag.dags["ferry_load_activity"]
    assert {t.task_id for t in dag.tasks} == {"plan", "load", "reconcile", "publish_page_view", "publish_click",
                                              "check_complete"}
    # runs waiting in check_complete (lateness 120 min) must not hold back the next hours' loads
    assert dag.max_active_runs == 4 and dag.catchup is False
    load = dag.get_task("load")
    assert load.retries == 3 and load.retry_exponential_backoff and not load.depends_on_past
    assert load.max_retry_delay == dt.timedelta(hours=1)
    check = dag.get_task("check_complete")
    assert check.retries == 0 and check.mode == "reschedule" and check.poke_interval == 300
    assert [a.uri for a in dag.get_task("publish_click").outlets] == ["ferry://warehouse/ferry/click"]
    assert dag.get_task("publish_click").upstream_task_ids == {"reconcile", "plan"}
    # hourly, with real one-hour data intervals
    import pendulum

    interval = dag.timetable.infer_manual_data_interval(run_after=pendulum.datetime(2024, 5, 1, 13, tz="UTC"))
    assert interval.end - interval.start == dt.timedelta(hours=1)


@pytest.mark.slow
def test_spark_connection_switches_load_to_spark_submit(tmp_path):
    cfg = tmp_path / "dags.yaml"
    cfg.write_text("defaults: {zookeeper: '127.0.0.1:2181/x', state_dir: /tmp/x, spark_conn_id: spark_yarn,\n"
                   "           live_zookeepers: ['127.0.0.1:2181/live']}\n"
                   "groups: [{name: g1, topics: [a, b.c]}]\n")
    bag = _bag(str(cfg))
    assert bag.import_errors == {}
    dag = bag.dags["ferry_load_g1"]
    load = dag.get_task("load")
    assert type(load).__name__ == "SparkSubmitOperator" and getattr(load, "conn_id", getattr(load, "_conn_id", None)) == "spark_yarn"
    assert load.application.endswith("loaders/cli.py")
    assert type(dag.get_task("reconcile")).__name__ == "SparkSubmitOperator"
    assert "publish_b_c" in dag.task_ids


@pytest.mark.parametrize("text, message", [
    ("groups: [{name: g, topics: [a]}]", "needs 'zookeeper'"),
    ("defaults: {zookeeper: z, state_dir: s, completeness: offline-only}\ngroups: [{name: g, topics: [a], lateness: 5}]",
     "unknown key"),
    ("defaults: {zookeeper: z, state_dir: s, completeness: offline-only}\ngroups: [{name: 'bad-name', topics: [a]}]",
     "letters, digits"),
    # completeness from the live counts is the only default: no live clusters named and no explicit opt-out
    ("defaults: {zookeeper: z, state_dir: s}\ngroups: [{name: g, topics: [a]}]", "no live_zookeepers"),
    ("defaults: {zookeeper: z, state_dir: s, completeness: mirrored}\ngroups: [{name: g, topics: [a]}]",
     "completeness must be one of"),
])
def test_bad_config_is_an_import_error_naming_the_problem(tmp_path, text, message):
    cfg = tmp_path / "dags.yaml"
    cfg.write_text(text)
    bag = _bag(str(cfg))
    assert len(bag.import_errors) == 1
    assert message in next(iter(bag.import_errors.values()))
