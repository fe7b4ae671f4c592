"""The cluster's faults around `ferry load --master spark://...` on a real standalone cluster (a master with
FILESYSTEM recovery and two workers from the pinned PySpark's Spark, on 127.0.0.1): the driver killed with
-9 mid-load (the next run's recovery), the master restarted between loads (the next load runs), and a
worker whose disk is full (a 16 MB tmpfs under its work and scratch dirs, filled: the load runs on the other
worker), and the warehouse full (the run fails with one line, commits nothing; the next run loads it). Each ends
with every hour's rows exactly once and the books balanced ("complete (produced ...)" for the topic)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry.spark_standalone import SparkStandalone
from ferry.zk.local_process import free_port
from tests.loaders.conftest import COUNT_SCRIPT, create_topic, past_hour, produce, spread

# each test is two loads on a 2-core machine shared with other suites: minutes, beyond the default 600 s
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:  # the disk-full case needs a small filesystem of its own: root (as in CI)
        pytest.fail(f"cannot mount a tmpfs for the full worker disk (run as root): {done.stderr.strip()}")


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory: pytest.TempPathFactory):
    """A 16 MB filesystem for the second worker's work dir and executor scratch dirs."""
    path = tmp_path_factory.mktemp("small-disk") / "mnt"
    _mount_tmpfs(path, "16m")
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, small_disk: Path):
    c = SparkStandalone(tmp_path_factory.mktemp("spark-faults"), workers=2, cores=1, memory="1g",
                        recovery=True)
    full = c.workers[1]
    full.work_dir, full.local_dir = small_disk / "work", small_disk / "local"
    c.start(timeout=300)  # JVMs on a shared 2-core machine: ~1-2 min
    yield c
    c.stop()


def _env() -> dict[str, str]:
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                SPARK_LOCAL_IP="127.0.0.1")


def _load_cmd(offline, cluster: SparkStandalone, topic: str, state: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "ferry.cli", "load", "--zookeeper", offline.zk, "--topics", topic,
            "--state-dir", str(state), "--database", "k", "--max-per-split", "500", "--master", cluster.url,
            "--json", str(out),
            "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=512m",
            "--conf", "spark.ui.showConsoleProgress=false", "--conf", f"spark.ui.port={free_port()}",
            "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0"]


def _load(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=900)


def _count(state: Path, topic: str) -> dict:
    count = subprocess.run([sys.executable, "-c", COUNT_SCRIPT, str(state), "k", topic], capture_output=True,
                           text=True, env=_env(), timeout=600)
    assert count.returncode == 0, count.stderr[-3000:]
    line = next(x for x in count.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _balanced(run: subprocess.CompletedProcess, topic: str) -> None:
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"{topic} " in run.stdout and "complete (produced" in run.stdout, run.stdout[-3000:]
    assert "incomplete" not in run.stdout, run.stdout[-3000:]


def _no_leftovers(state: Path, topic: str) -> None:
    """No hidden (in-progress) files or directories left in the table's tree after the recovery."""
    table_root = state / "warehouse" / "k" / topic
    hidden = [p for p in table_root.rglob("*") if p.name.startswith((".", "_temporary")) or "inprogress" in p.name]
    assert not hidden, hidden[:5]


def test_driver_killed_mid_load_next_run_recovers(offline, cluster: SparkStandalone, tmp_path: Path):
    topic = create_topic(offline, partitions=4, prefix="drk")
    n = produce(offline, topic, spread(past_hour(3), 8000, 2 * 3_600_000), round_robin=4)
    state, out = tmp_path / "state", tmp_path / "load.json"
    table_root = state / "warehouse" / "k" / topic
    log_path = tmp_path / "killed.out"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_load_cmd(offline, cluster, topic, state, out), stdout=log,
                                stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and proc.poll() is None:
                if any(table_root.rglob("*.parquet*")):
                    break  # executors on the workers are writing the run's files
                time.sleep(0.05)
            assert proc.poll() is None, "the load ended before its driver could be killed:\n" + log_path.read_text()[-3000:]
            os.killpg(proc.pid, signal.SIGKILL)  # the driver: `ferry load`, its JVM and Python workers
            proc.wait(30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    ledger = json.loads((state / "ledger.json").read_text())
    killed_before_commit = topic not in ledger["offsets"]
    assert ledger["in_flight"] or not killed_before_commit
    # the master drops the dead driver's application and frees its executors' cores for the next run
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and cluster.master.state().get("activeapps"):
        time.sleep(0.5)
    assert not cluster.master.state().get("activeapps"), cluster.master.state().get("activeapps")

    rerun = _load(_load_cmd(offline, cluster, topic, state, out))
    _balanced(rerun, topic)
    if killed_before_commit:
        assert "never committed: removed its" in rerun.stdout, rerun.stdout[-3000:]
    assert json.loads(out.read_text())["committed"]
    assert _count(state, topic) == {"rows": n, "distinct": n}
    _no_leftovers(state, topic)


def test_master_restarted_between_loads(offline, cluster: SparkStandalone, tmp_path: Path):
    topic = create_topic(offline, partitions=2, prefix="mrs")
    first = produce(offline, topic, spread(past_hour(4), 3000, 3_600_000), round_robin=2)
    state, out = tmp_path / "state", tmp_path / "load.json"
    _balanced(_load(_load_cmd(offline, cluster, topic, state, out)), topic)

    cluster.master.restart(timeout=300)  # same ports; recovery brings its workers back
    alive = cluster.master.wait_workers(2, timeout=300)
    assert {w["webuiaddress"].rsplit(":", 1)[1] for w in alive} == {str(w.webui_port) for w in cluster.workers}

    second = produce(offline, topic, spread(past_hour(2), 3000, 3_600_000), round_robin=2)
    run = _load(_load_cmd(offline, cluster, topic, state, out))
    _balanced(run, topic)
    result = json.loads(out.read_text())
    assert result["committed"] and result["rows"] == second
    assert {e["worker"] for e in result["executors"] if e["tasks"]}, result["executors"]
    assert _count(state, topic) == {"rows": first + second, "distinct": first + second}


def _fill(disk: Path) -> Path:
    """Write zeros until the filesystem says ENOSPC (the executors' logs may have filled it already); the
    file is removed to make room again."""
    filler = disk / f"filler-{os.getpid()}-{time.monotonic_ns()}"
    try:
        with open(filler, "wb") as f:
            for _ in range(10_000):  # bounded: 16 MB in 64 kB chunks fills long before
                f.write(b"\0" * 65536)
                f.flush()
    except OSError as e:
        assert e.errno == 28, e
    assert os.statvfs(disk).f_bavail == 0
    return filler


def test_worker_disk_full_runs_elsewhere_exactly_once(offline, cluster: SparkStandalone, small_disk: Path,
                                                      tmp_path: Path):
    """The second worker's disk is full: its executors fail to start ("No space left on device"; the master
    keeps relaunching them), so every split runs on the first worker's executor, and the run commits every
    row once."""
    topic = create_topic(offline, partitions=4, prefix="dfull")
    n = produce(offline, topic, spread(past_hour(3), 6000, 2 * 3_600_000), round_robin=4)
    state, out = tmp_path / "state", tmp_path / "load.json"
    filler = _fill(small_disk)
    try:
        run = _load(_load_cmd(offline, cluster, topic, state, out))
    finally:
        filler.unlink(missing_ok=True)
    _balanced(run, topic)
    result = json.loads(out.read_text())
    assert result["committed"] and result["rows"] == n
    healthy = f"127.0.0.1:{cluster.workers[0].webui_port}"
    assert {e["worker"] for e in result["executors"] if e["tasks"]} == {healthy}, result["executors"]
    assert "No space left on device" in cluster.workers[1].log_file.read_text(errors="replace")
    assert _count(state, topic) == {"rows": n, "distinct": n}
    _no_leftovers(state, topic)


def test_warehouse_disk_full_fails_cleanly_then_exactly_once(offline, cluster: SparkStandalone, tmp_path: Path):
    """The warehouse the executors write into is full: every attempt of a split fails with ENOSPC, the run
    fails with one line and commits nothing (the table shows no row); once there is room the next run
    removes the failed run's files and loads every row once."""
    topic = create_topic(offline, partitions=2, prefix="whfull")
    n = produce(offline, topic, spread(past_hour(3), 3000, 2 * 3_600_000), round_robin=2)
    warehouse, state, out = tmp_path / "warehouse", tmp_path / "state", tmp_path / "load.json"
    _mount_tmpfs(warehouse, "8m")
    try:
        cmd = _load_cmd(offline, cluster, topic, state, out) + ["--warehouse", str(warehouse)]
        filler = _fill(warehouse)
        failed = _load(cmd)
        assert failed.returncode != 0, failed.stdout[-3000:]
        # ferry's own word is one line (around it, Spark's JVM logs the lost tasks on the same stderr)
        errors = [x for x in failed.stderr.splitlines() if x.startswith("ferry load: error:")]
        assert len(errors) == 1, failed.stderr[-3000:]
        assert "run failed" in errors[0] and "No space left on device" in errors[0], errors[0]
        assert "Nothing uncommitted is visible" in errors[0], errors[0]
        ledger = json.loads((state / "ledger.json").read_text())
        assert topic not in ledger["offsets"]
        filler.unlink(missing_ok=True)
        run = _load(cmd)
        _balanced(run, topic)
        if ledger["in_flight"]:  # the failed run had begun: its files are removed before anything else
            assert "never committed: removed its" in run.stdout, run.stdout[-3000:]
        assert json.loads(out.read_text())["rows"] == n
        assert _count(state, topic) == {"rows": n, "distinct": n}
        table_root = warehouse / "k" / topic
        hidden = [p for p in table_root.rglob("*") if p.name.startswith(".") or "inprogress" in p.name]
        assert not hidden, hidden[:5]
    finally:
        subprocess.run(["umount", "-l", str(warehouse)], check=False)
