"""The load DAG against a secured offline cluster (docs/dags.md "Secured clusters"): the client settings come
from an Airflow `kafka` connection (extra: librdkafka properties), are written at task run time to a 0600 file
in the state directory and passed by path; the password is in no rendered template field, no command line and
no task log."""

from __future__ import annotations

import datetime as dt
import json
import stat
import uuid
from pathlib import Path

import pytest

from tests.loaders.conftest import PAGE_VIEW, label, past_hour, spread
from tests.loaders.secured_offline import start_loader_cluster

LOADER_PW = "Dag-loader-secret-9"
OPS_PW = "Dag-ops-secret-10"


def _kafka_connection(cluster, user: str, password: str) -> str:
    return json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": cluster.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
        "ssl.ca.location": str(cluster.certs.ca)}})


def _rendered_fields() -> list[str]:
    """Every task's rendered template fields Airflow stored (what its UI shows)."""
    from airflow import settings
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from sqlalchemy import select

    with settings.Session() as session:
        return [json.dumps(r.rendered_fields, default=str)
                for r in session.execute(select(RenderedTaskInstanceFields)).scalars().all()]


def test_spark_submit_tasks_get_the_client_file_path_never_the_password(tmp_path, monkeypatch):
    """spark-submit's arguments, environment and conf (template fields) name the file only."""
    monkeypatch.setenv("AIRFLOW_CONN_OFFLINE_KAFKA", json.dumps({"conn_type": "kafka", "extra": {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "loader",
        "sasl.password": LOADER_PW}}))
    cfg_file = tmp_path / "dags.yaml"
    cfg_file.write_text(f"defaults: {{zookeeper: '127.0.0.1:2181/x', state_dir: '{tmp_path / 'st'}', "
                        "spark_conn_id: spark_yarn, completeness: offline-only, kafka_conn_id: offline_kafka}\n"
                        "groups: [{name: g1, topics: [a]}]\n")
    from ferry_dag_factory import build_dag, load_config

    cfg = load_config(cfg_file)[0]
    dag = build_dag(cfg)
    for task_id in ("load", "reconcile"):
        task = dag.get_task(task_id)
        args = task.application_args
        path = args[args.index("--command-config") + 1]
        assert path == str(tmp_path / "st" / "client-config" / "airflow-offline_kafka.properties")
        for name in task.template_fields:
            assert LOADER_PW not in json.dumps(getattr(task, name, None), default=str), name
    assert not (tmp_path / "st").exists()  # nothing written while the DAG is parsed
    # the plan task (run time) writes the file the load reads: private, with the connection's settings
    written = Path(cfg.load_config().client_config)
    assert written == Path(path) and stat.S_IMODE(written.stat().st_mode) == 0o600
    assert f"sasl.password={LOADER_PW}" in written.read_text()


@pytest.mark.slow
@pytest.mark.spark
def test_dag_loads_a_secured_cluster_with_the_connection_settings(airflow_db, zk_server, tmp_path, monkeypatch,
                                                                  capfd):
    from ferry.client.producer import Producer
    from ferry.loaders.ledger import Ledger
    from ferry.schemas.registry import SchemaRegistry
    from ferry.schemas.wire import AvroSerializer
    from ferry.wire.client_config import ClientConfig
    from ferry.zk import ClusterRegistry

    cluster = start_loader_cluster(zk_server.connect, tmp_path / "offline", "sdv_", OPS_PW, LOADER_PW)
    try:
        topic = f"sdv_{uuid.uuid4().hex[:8]}"
        with ClusterRegistry(cluster.zk) as reg:
            reg.create_topic(topic, 2)
        hour = past_hour(3)
        ops = ClientConfig.from_file(cluster.sasl_ssl_config("ops", OPS_PW))
        with SchemaRegistry(cluster.zk) as reg:
            ser = AvroSerializer(reg, topic, PAGE_VIEW)
            producer = Producer(zookeeper=cluster.zk, application="secdag-test", datacenter="offline",
                                audit_interval_s=1, client_config=ops)
            for i, ts in enumerate(spread(hour, 200)):
                producer.send(topic, ser({"event_time": ts, "guid": str(uuid.uuid4()), "member_id": i,
                                          "page": "p", "tags": [], "attrs": {}}), timestamp_ms=ts)
            assert producer.flush(60) == 0
            assert producer.close(60) == 0  # its audit counts reach `_audit` as it closes

        monkeypatch.setenv("AIRFLOW_CONN_OFFLINE_SECURED", _kafka_connection(cluster, "loader", LOADER_PW))
        database = f"sd_{uuid.uuid4().hex[:8]}"
        config = tmp_path / "ferry_dags.yaml"
        config.write_text(
            f"defaults:\n  zookeeper: '{cluster.zk}'\n  state_dir: '{tmp_path / 'state'}'\n"
            f"  warehouse: '{tmp_path / 'warehouse'}'\n  database: {database}\n  lateness_minutes: 60\n"
            f"  retries: 0\n  completeness: offline-only\n  kafka_conn_id: offline_secured\n"
            f"groups:\n  - name: sd_{database[3:]}\n    topics: [{topic}]\n")
        monkeypatch.setenv("FERRY_DAGS_CONFIG", str(config))
        from ferry_dag_factory import build_dag, load_config

        cfg = load_config(config)[0]
        dag = build_dag(cfg)
        logical = dt.datetime.fromtimestamp(hour / 1000, dt.UTC) + dt.timedelta(hours=1)
        dr = dag.test(logical_date=logical)
        states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
        assert str(dr.state) == "success" and set(states.values()) == {"success"}, states
        d, h = label(hour)
        assert Ledger(cfg.state_dir).published_hours(f"{database}.{topic}") == {f"{d}T{h}": 200}
        written = tmp_path / "state" / "client-config" / "airflow-offline_secured.properties"
        assert stat.S_IMODE(written.stat().st_mode) == 0o600
        rendered = _rendered_fields()
        assert rendered and not [r for r in rendered if LOADER_PW in r]
        out, err = capfd.readouterr()
        assert LOADER_PW not in out + err  # the task logs dag.test() prints
    finally:
        cluster.stop()
