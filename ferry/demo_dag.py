"""The demo's hourly load: the generated Airflow DAG (dags/) run in-process, once per hour of events."""

from __future__ import annotations

import datetime as dt
import logging
import os
import subprocess
import sys
from pathlib import Path

from ferry.demo_report import hour_label
from ferry.demo_steps import DemoCluster


def run_hourly_dag(cluster: DemoCluster, hours: list[int], short: bool = False) -> None:
    """Run the generated hourly DAG (dags/) in-process with ``dag.test()`` once per hour: plan, Spark
    load, reconcile, publish. Airflow keeps its SQLite database under the demo directory."""
    repo = Path(__file__).resolve().parent.parent
    home = cluster.root / "airflow"
    home.mkdir(exist_ok=True)
    config = cluster.root / "ferry_dags.yaml"
    config.write_text(
        "defaults:\n"
        f"  zookeeper: '{cluster.offline_zk}'\n"
        f"  state_dir: '{cluster.root / 'warehouse-state'}'\n"
        "  database: ferry\n  lateness_minutes: 0\n  retries: 0\n  check_poke_s: 5\n"
        f"  live_zookeepers: ['{cluster.live_zk}']\n"
        f"  max_per_split: {20_000 if short else 200_000}\n"
        "  spark_conf: {spark.ui.showConsoleProgress: 'false'}\n"
        + ("  kafka_conn_id: ferry_offline\n  live_kafka_conn_id: ferry_live\n" if cluster.security else "")
        + "groups:\n  - name: activity\n    topics: [page_view, click, search]\n")
    if cluster.security is not None:  # the loader's and the monitor's settings: Airflow connections, in this
        os.environ.update(cluster.security.airflow_connections())  # process only (no command line, no file)
    os.environ.update({
        "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"), "FERRY_DAGS_CONFIG": str(config),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"), "PYSPARK_PYTHON": sys.executable,
        "FERRY_SPARK_LOG_LEVEL": "ERROR", "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "SPARK_LOCAL_IP": "127.0.0.1"})
    if not (home / "airflow.db").exists():
        cluster.progress.say("preparing Airflow's database (airflow db migrate, once per demo directory)")
        airflow = str(Path(sys.executable).with_name("airflow"))
        proc = subprocess.run([airflow, "db", "migrate"], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError("airflow db migrate failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
    sys.path.insert(0, str(repo / "dags"))
    # the DAG factory is not a ferry module: it lives in the dags folder (on the path only from here) and
    # builds Airflow objects; the demo's other steps never pay for Airflow
    from ferry_dag_factory import build_dag, load_config

    dag = build_dag(load_config(config)[0])
    for noisy in ("kazoo", "py4j", "airflow"):  # Airflow's logging setup turns these up; the demo has its own
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        _run_hours(cluster, dag, hours)
    finally:
        if cluster.security is not None:  # the dashboard and other children started later do not inherit them
            for name in cluster.security.airflow_connections():
                os.environ.pop(name, None)


def _run_hours(cluster: DemoCluster, dag, hours: list[int]) -> None:
    for n, hour in enumerate(hours, 1):
        logical = dt.datetime.fromtimestamp(hour / 1000, dt.UTC) + dt.timedelta(hours=1)
        cluster.progress.say(f"Airflow: {dag.dag_id} for the hour {hour_label(hour)} ({n}/{len(hours)}): "
                             "plan -> load (Spark) -> reconcile -> publish")
        dr = dag.test(logical_date=logical)
        states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
        cluster.progress.say(f"  run {dr.state}: " + ", ".join(f"{t}={s}" for t, s in sorted(states.items())))
