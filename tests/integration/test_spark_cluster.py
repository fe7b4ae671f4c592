"""The hourly load on a Spark standalone cluster in containers, submitted by the DAG (issue 40).

A Spark master and two workers (1 core each, executors of 512 MB) from the ferry-loader image, the offline
cluster (ZooKeeper + a broker), PostgreSQL as the Hive metastore, and the Airflow host whose DAG submits the load
through SparkSubmitOperator on a `spark` connection to spark://spark-master:7077 (client mode: the driver runs in
the Airflow container). The warehouse is one directory mounted at /warehouse in the driver's and both workers'
containers. 1,000,000 page-view events (Avro) are produced into the offline cluster in message sets, with the
producer tier's counts in `_audit`; the DAG's run for their hour loads them in splits of 62,500 messages. While
the load runs, the driver's REST API shows tasks on both workers; once the first worker has finished a task and
runs another, its container is killed (SIGKILL to the worker, its executor and Python workers) and Spark reruns
that worker's unfinished work on the other. Then: every DAG task succeeded, the tables hold each event once (by
guid, through the metastore with `ferry sql` and with DuckDB over the reader tree `ferry.current`), and the
books — the offline `_audit` counts — say produced = loaded, 0 missing, 0 duplicates, complete.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from ferry_datacenters import (
    OFFLINE_ZK,
    Datacenters,
    broker_command,
    create_network,
    remove_all,
    wait_registered,
    wait_zookeeper,
)
from ferry_docker_helpers import build_images, docker, docker_or_skip
from spark_cluster import (
    AIRFLOW_ENV,
    POSTGRES,
    SPARK_ENV,
    WAREHOUSE,
    WORKLOAD,
    master_command,
    master_state,
    run,
    start,
    wait_postgres,
    wait_workers,
    worker_command,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

EVENTS = 1_000_000
SPLIT = 62_500  # 4 partitions of 250,000: 16 splits (+ `_audit`'s), so both executors get several
TOPIC = "page_view"
METASTORE = "postgresql://ferry@metastore:5432/metastore"
VICTIM, SURVIVOR = "spark-worker-1", "spark-worker-2"
DAG_CONFIG = f"""\
defaults:
  zookeeper: '{OFFLINE_ZK}'
  state_dir: /var/lib/ferry/load
  warehouse: {WAREHOUSE}
  database: ferry
  metastore: '{METASTORE}'
  lateness_minutes: 60
  retries: 0
  max_per_split: {SPLIT}
  completeness: offline-only
  spark_conn_id: spark_cluster
  spark_conf:
    spark.executor.memory: 512m
    spark.executor.cores: '1'
    spark.cores.max: '2'
    spark.driver.memory: 512m
    spark.ui.showConsoleProgress: 'false'
    spark.scheduler.minRegisteredResourcesRatio: '1.0'
    spark.scheduler.maxRegisteredResourcesWaitingTime: 20s
groups:
  - name: spark
    topics: [{TOPIC}]
"""


@pytest.fixture(scope="module")
def spark_site(tmp_path_factory: pytest.TempPathFactory):
    """The containers of the module docstring, up: ZooKeeper serving, the broker registered, PostgreSQL with the
    metastore's database, both workers ALIVE at the master, Airflow's database migrated."""
    docker_or_skip()
    t0 = time.monotonic()
    images = build_images("ferry", "loader")
    run_id = uuid.uuid4().hex[:6]
    roles = ["offline-zk", "offline-broker-1", "metastore", "spark-master", VICTIM, SURVIVOR, "airflow"]
    dcs = Datacenters(run_id=run_id, names={r: f"ferry-{run_id}-{r}" for r in roles}, networks={}, images=images)
    dcs.timings["images"] = time.monotonic() - t0
    # not under pytest's base temp: another pytest session of the same user prunes old base temps while this runs
    warehouse = Path(tempfile.mkdtemp(prefix="ferry-spark-warehouse-"))
    try:
        create_network(dcs, "offline")
        t1 = time.monotonic()
        ferry, loader = images["FERRY_IMAGE"], images["FERRY_LOADER_IMAGE"]
        start(dcs, "offline-zk", ferry, ["ferry", "zookeeper", "--port", "2181", "--data-dir",
                                         "/var/lib/ferry/zookeeper", "--host", "0.0.0.0"])
        start(dcs, "metastore", loader, ["sh", "-c", POSTGRES])
        start(dcs, "spark-master", loader, master_command(), env=SPARK_ENV)
        start(dcs, "airflow", loader, ["sleep", "infinity"], env=AIRFLOW_ENV, warehouse=warehouse)
        wait_zookeeper(dcs, "offline-zk")
        start(dcs, "offline-broker-1", ferry, broker_command(1, "offline-broker-1", OFFLINE_ZK, "offline"))
        for worker in (VICTIM, SURVIVOR):
            start(dcs, worker, loader, worker_command(worker), env=SPARK_ENV, warehouse=warehouse)
        migrate: dict = {}
        migrating = threading.Thread(target=lambda: migrate.update(out=_airflow_db_migrate(dcs)))
        migrating.start()
        wait_registered(dcs, "offline-broker-1", OFFLINE_ZK, 1)
        wait_postgres(dcs)
        wait_workers(dcs, 2)
        migrating.join(600)
        assert "out" in migrate, "airflow db migrate failed or hung (see above)"
        dcs.timings["start"] = time.monotonic() - t1
        print(f"\n[spark-integration] images {dcs.timings['images']:.1f}s, site up in {dcs.timings['start']:.1f}s")
        yield dcs, warehouse
    finally:
        remove_all(dcs)
        if not os.environ.get("FERRY_KEEP_CONTAINERS"):
            shutil.rmtree(warehouse, ignore_errors=True)


def _airflow_db_migrate(dcs: Datacenters) -> str:
    return run(dcs, "airflow", "airflow", "db", "migrate", timeout=600)


class Watcher:
    """spark_workload.py's `watch` in the Airflow container, read line by line: kills the victim's container
    the moment its executor has finished a task and runs another."""

    def __init__(self, dcs: Datacenters) -> None:
        self.dcs = dcs
        self.lines: list[str] = []
        self.killed_at: float | None = None
        self.proc = subprocess.Popen(["docker", "exec", "-i", dcs.names["airflow"], "python", "-", "watch",
                                      "--victim", VICTIM, "--timeout", "900"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.proc.stdin.write(WORKLOAD.decode())
        self.proc.stdin.close()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            if line.strip() == "BUSY" and self.killed_at is None:
                docker("kill", "--signal", "KILL", self.dcs.names[VICTIM], timeout=60)
                self.killed_at = time.monotonic()

    def result(self, timeout: float = 120) -> dict:
        self.thread.join(timeout)
        if self.proc.poll() is None:
            self.proc.kill()
        results = [ln for ln in self.lines if ln.startswith("RESULT ")]
        return json.loads(results[-1][len("RESULT "):]) if results else {"busy": False, "lines": self.lines[-40:]}

    def snapshots(self) -> list[dict]:
        return [json.loads(ln[len("EXECUTORS "):]) for ln in self.lines if ln.startswith("EXECUTORS ")]


def _duckdb_counts(warehouse: Path) -> tuple[int, int]:
    import duckdb

    tree = warehouse / "ferry.current" / TOPIC
    con = duckdb.connect()
    return con.execute(f"SELECT count(*), count(DISTINCT guid) FROM read_parquet('{tree}/*/*/*.parquet', "
                       "hive_partitioning=true)").fetchone()


def test_dag_loads_a_million_events_on_two_workers_one_killed(spark_site) -> None:
    dcs, warehouse = spark_site
    now_ms = int(time.time() * 1000)
    hour_ms = now_ms - now_ms % 3_600_000 - 2 * 3_600_000  # two hours ago: complete, clear of the boundary
    t0 = time.monotonic()
    produced = dcs.workload("airflow", "produce", "--zookeeper", OFFLINE_ZK, "--topic", TOPIC, "--count",
                            str(EVENTS), "--hour-ms", str(hour_ms), script=WORKLOAD, timeout=600)
    assert produced["_rc"] == 0 and produced["produced"] == EVENTS, produced
    print(f"[spark-integration] produced {EVENTS:,} events in {produced['seconds']}s")
    run(dcs, "airflow", "sh", "-c", "cat > /var/lib/ferry/dags.yaml", stdin=DAG_CONFIG.encode())

    watcher = Watcher(dcs)
    t1 = time.monotonic()
    p = docker("exec", "-i", "-e", "FERRY_DAGS_CONFIG=/var/lib/ferry/dags.yaml", dcs.names["airflow"], "python",
               "-", "dag", "--config", "/var/lib/ferry/dags.yaml", "--hour-ms", str(hour_ms), input=WORKLOAD,
               timeout=1200, check=False)
    dag_s = time.monotonic() - t1
    out = (p.stdout + p.stderr).decode(errors="replace")
    results = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    watched = watcher.result(timeout=120 if results else 5)
    assert results, out[-8000:]
    dag = json.loads(results[-1][len("RESULT "):])
    print(f"[spark-integration] DAG run {dag_s:.0f}s: {dag['tasks']}")
    print("\n".join(ln for ln in out.splitlines() if "worker(s)" in ln or "rows/s" in ln or "complete (" in ln))
    assert dag["state"] == "success" and set(dag["tasks"].values()) == {"success"}, (dag, out[-6000:])

    # tasks ran on both workers: the victim's executor finished one before its worker was killed mid-load,
    # the survivor's finished the rest (the victim's unfinished task included)
    assert watched["busy"] and watcher.killed_at is not None, watcher.lines[-20:]
    final = watched["executors"]
    assert final[VICTIM]["completed"] >= 1 and not final[VICTIM]["alive"], final
    assert final[SURVIVOR]["completed"] >= 1 and final[SURVIVOR]["alive"], final
    after_kill = [s for s in watcher.snapshots() if not s.get(VICTIM, {}).get("alive", True)]
    assert after_kill, "the driver never saw the victim's executor lost"
    assert final[SURVIVOR]["completed"] > after_kill[0][SURVIVOR]["completed"], "nothing ran after the kill"
    # the master saw the same: the survivor alive, the killed worker not
    alive = {w["host"] for w in master_state(dcs).get("workers", []) if w.get("state") == "ALIVE"}
    assert SURVIVOR in alive and VICTIM not in alive, alive

    # the books (the offline `_audit` counts): produced = loaded, 0 missing, 0 duplicates, complete
    books = json.loads(run(dcs, "airflow", "ferry", "audit", "report", "--zookeeper", OFFLINE_ZK, "--offline-only",
                           "--format", "json", "--hours", "0", timeout=180))
    hours = [h for h in books["hours"] if h["hour_start"] == hour_ms and h["topic"] == TOPIC]
    assert len(hours) == 1, books
    h = hours[0]
    assert (h["produced"], h["loaded"], h["duplicates"], h["complete"]) == (EVENTS, EVENTS, 0, True), h

    # the tables: through the metastore (PostgreSQL) with spark-sql, and DuckDB over the reader tree
    sql = run(dcs, "airflow", "ferry", "sql", "--metastore", METASTORE, "--warehouse", WAREHOUSE, "-e",
              f"SELECT count(*), count(DISTINCT guid) FROM ferry.{TOPIC}", timeout=300)
    rows = [ln.split("\t") for ln in sql.splitlines() if ln.strip() and ln.split("\t")[0].isdigit()]
    assert rows and tuple(map(int, rows[-1])) == (EVENTS, EVENTS), sql[-3000:]
    assert _duckdb_counts(warehouse) == (EVENTS, EVENTS)
    print(f"[spark-integration] test body {time.monotonic() - t0:.0f}s")
    sys.stdout.flush()
