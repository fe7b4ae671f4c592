"""`ferry load --master spark://...` on a real Spark standalone cluster: a master and two workers (1 core,
1 GB each) started from the pinned PySpark's own Spark on 127.0.0.1, the offline broker, a warehouse
directory that the driver and both workers see at the same path. Rows exactly once, tasks on both workers
(the load's own per-executor report, checked against the workers' UIs), and a worker killed with -9
mid-load (Spark reruns its splits on the other one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ferry.spark_standalone import SparkStandalone
from ferry.zk.local_process import free_port
from tests.loaders.conftest import COUNT_SCRIPT, create_topic, past_hour, produce, spread

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory):
    cluster = SparkStandalone(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1, memory="1g")
    cluster.start(timeout=300)  # JVMs on a shared 2-core machine: ~1-2 min
    yield cluster
    cluster.stop()


def _env() -> dict[str, str]:
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                SPARK_LOCAL_IP="127.0.0.1")


def _load_cmd(offline, cluster: SparkStandalone, topic: str, state: Path, out: Path, ui_port: int) -> list[str]:
    return [sys.executable, "-m", "ferry.cli", "load", "--zookeeper", offline.zk, "--topics", topic,
            "--state-dir", str(state), "--database", "k", "--max-per-split", "500", "--master", cluster.url,
            "--json", str(out),
            "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=512m",
            "--conf", "spark.ui.showConsoleProgress=false", "--conf", f"spark.ui.port={ui_port}",
            # wait (up to 30 s by default) for both workers' executors before the first task is scheduled
            "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0"]


def _count(state: Path, topic: str) -> dict:
    count = subprocess.run([sys.executable, "-c", COUNT_SCRIPT, str(state), "k", topic], capture_output=True,
                           text=True, env=_env(), timeout=600)
    assert count.returncode == 0, count.stderr[-3000:]
    line = next(x for x in count.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _worker_ports(cluster: SparkStandalone) -> set[str]:
    return {f"127.0.0.1:{w.webui_port}" for w in cluster.workers}


def test_load_on_two_workers_exactly_once(offline, spark_cluster: SparkStandalone, tmp_path: Path):
    topic = create_topic(offline, partitions=4, prefix="cl")
    n = produce(offline, topic, spread(past_hour(3), 6000, 2 * 3_600_000), round_robin=4)
    state, out = tmp_path / "state", tmp_path / "load.json"
    run = subprocess.run(_load_cmd(offline, spark_cluster, topic, state, out, free_port()), capture_output=True,
                         text=True, env=_env(), timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["committed"] and result["rows"] == n
    # the load's report: executors on both workers, every split's rows counted once, rows/s per executor
    executors = result["executors"]
    assert {e["worker"] for e in executors if e["tasks"]} == _worker_ports(spark_cluster), executors
    assert sum(e["tasks"] for e in executors) >= n // 500  # the topic's splits (and `_audit`'s)
    assert sum(e["rows"] for e in executors) == n + sum(t["rows"] for t in result["topics"] if t["topic"] == "_audit")
    assert all(e["rows_per_s"] > 0 for e in executors if e["rows"])
    assert "tasks ran on 2 worker(s)" in run.stdout
    assert f"{topic} " in run.stdout and "complete (produced" in run.stdout
    assert "incomplete" not in run.stdout, run.stdout[-3000:]
    assert _count(state, topic) == {"rows": n, "distinct": n}


def _executors(ui_port: int) -> list[dict]:
    """The running driver's executors (REST API), [] while it is not up."""
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    try:
        with urllib.request.urlopen(base, timeout=2) as r:
            app = json.load(r)[0]["id"]
        with urllib.request.urlopen(f"{base}/{app}/executors", timeout=2) as r:
            return [e for e in json.load(r) if e["id"] != "driver"]
    except (OSError, ValueError, IndexError, KeyError):
        return []


def test_worker_killed_mid_load_rows_exactly_once(offline, spark_cluster: SparkStandalone, tmp_path: Path):
    topic = create_topic(offline, partitions=4, prefix="clk")
    n = produce(offline, topic, spread(past_hour(3), 40_000, 2 * 3_600_000), round_robin=4)
    state, out, ui_port = tmp_path / "state", tmp_path / "load.json", free_port()
    victim = spark_cluster.workers[0]
    log_path = tmp_path / "load.out"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_load_cmd(offline, spark_cluster, topic, state, out, ui_port), stdout=log,
                                stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
        try:
            deadline, busy = time.monotonic() + 600, False
            while time.monotonic() < deadline and proc.poll() is None and not busy:
                busy = any(f"127.0.0.1:{victim.webui_port}" in e.get("executorLogs", {}).get("stdout", "")
                           and e["activeTasks"] + e["completedTasks"] > 0 for e in _executors(ui_port))
                time.sleep(0.2)
            assert busy and proc.poll() is None, "no task ran on the worker before the load ended:\n" + log_path.read_text()[-3000:]
            victim.kill_group()  # the worker and its executor JVM and Python workers: SIGKILL
            rc = proc.wait(900)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
    text = log_path.read_text()
    assert rc == 0, text[-4000:]
    result = json.loads(out.read_text())
    assert result["committed"] and result["rows"] == n, text[-3000:]
    survivor = f"127.0.0.1:{spark_cluster.workers[1].webui_port}"
    assert any(e["worker"] == survivor and e["tasks"] for e in result["executors"]), result["executors"]
    assert "incomplete" not in text, text[-3000:]
    assert _count(state, topic) == {"rows": n, "distinct": n}
