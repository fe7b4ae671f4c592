"""`ferry demo --short` runs the whole pipeline for real (ZooKeeper, 3 brokers, a mirror link, Airflow + Spark),
prints complete books, and a second run in the same directory works and stays complete; while that second run
holds its metastore (--keep-running), `ferry sql` in another process answers with the committed count."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _demo(tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run([sys.executable, "-m", "ferry.cli", "demo", "--short", "--dir", str(tmp / "demo"), *extra],
                          capture_output=True, text=True, timeout=1200, env=env)


@pytest.mark.timeout(3000)  # two demo runs (each up to 1200 s) and a query: minutes, more on a busy machine
def test_demo_short_twice(tmp_path: Path) -> None:
    first = _demo(tmp_path, "--seed", "7")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    out = first.stdout
    for expected in ("The books", "Mirror (link live on offline broker(s) 101: running)", "Analyst: top pages per hour",
                     "every hour complete: yes", "stopped; data and logs kept"):
        assert expected in out, out[-3000:]
    report = json.loads((tmp_path / "demo" / "last-report.json").read_text())
    books = report["books"]
    assert len(books) == 3 * 2 and all(b["complete"] for b in books)
    assert sum(b["produced"] for b in books) == 3000 == sum(b["loaded"] for b in books)
    assert all(b["duplicates"] == 0 for b in books)
    assert report["top_pages"], "the analyst query returned nothing"
    assert not _left_running(tmp_path / "demo")

    assert "metastore: PostgreSQL on 127.0.0.1" in out, out[-3000:]  # scripts/setup.sh installs PostgreSQL

    second = _demo_kept_running(tmp_path, "--seed", "8", "--events", "500")
    assert "exists (reusing" in second
    report2 = json.loads((tmp_path / "demo" / "last-report.json").read_text())
    books2 = report2["books"]
    assert books2 and all(b["complete"] and b["duplicates"] == 0 for b in books2)
    # more than the first run's 3000 (unless an hour boundary passed between the runs and shifted the window)
    assert sum(b["produced"] for b in books2) == sum(b["loaded"] for b in books2) > 500
    assert not _left_running(tmp_path / "demo")
    pg_port = json.loads((tmp_path / "demo" / "ports.json").read_text())["postgres"]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"-p {pg_port} " not in ps  # the demo's PostgreSQL stopped too (its data may live under /tmp)


def _left_running(demo_dir: Path) -> list[str]:
    """The servers the demo started that still run: python (brokers, mirror, Airflow, the dashboard), java
    (ZooKeeper, Spark) or postgres processes naming its directory. Other programs that merely name it (a
    shell's `ls` or `rm` from outside the test) are not the demo's."""
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if str(demo_dir) in line
            and Path(line.split()[0]).name.startswith(("python", "java", "postgres"))]


def _demo_kept_running(tmp: Path, *extra: str) -> str:
    """`ferry demo --keep-running`: once it has loaded and still holds its metastore, `ferry sql -e` in another
    process must answer with the page_view rows the demo's books say were loaded; then Ctrl-C stops it all."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("FERRY_METASTORE", None)
    log = tmp / "kept.out"
    with open(log, "w") as out:
        demo = subprocess.Popen([sys.executable, "-m", "ferry.cli", "demo", "--short", "--keep-running", "--dir",
                                 str(tmp / "demo"), "--dashboard-listen", "127.0.0.1:0", *extra],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 1200
        while "everything is still running" not in log.read_text():
            assert demo.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, "the demo did not finish loading within 1200 s"
            time.sleep(2)
        books = [b for b in json.loads((tmp / "demo" / "last-report.json").read_text())["books"]
                 if b["topic"] == "page_view"]
        loaded = sum(b["loaded"] for b in books)
        first, last = (time.strftime("%Y-%m-%d %H", time.gmtime(f(b["hour_start"] for b in books) / 1000))
                       for f in (min, max))
        query = f"SELECT count(*) FROM ferry.page_view WHERE concat(dt, ' ', hr) BETWEEN '{first}' AND '{last}'"
        sql = subprocess.run([sys.executable, "-m", "ferry.cli", "sql", "--state-dir",
                              str(tmp / "demo" / "warehouse-state"), "-e", query],
                             capture_output=True, text=True, timeout=300, env=env)
        assert sql.returncode == 0, sql.stderr[-3000:]
        assert sql.stdout.split() == [str(loaded)], (sql.stdout, loaded)
        assert demo.poll() is None, "the demo ended before the query: it did not hold its metastore meanwhile"
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(120)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
    return log.read_text()
