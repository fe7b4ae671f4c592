"""`ferry demo --short` runs the whole pipeline for real (ZooKeeper, 3 brokers, mirror, Airflow + Spark),
prints complete books, and a second run in the same directory works and stays complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _demo(tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run([sys.executable, "-m", "ferry.cli", "demo", "--short", "--dir", str(tmp / "demo"), *extra],
                          capture_output=True, text=True, timeout=1200, env=env)


def test_demo_short_twice(tmp_path: Path) -> None:
    first = _demo(tmp_path, "--seed", "7")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    out = first.stdout
    for expected in ("The books", "Mirror (group ferry-mirror", "Analyst: top pages per hour",
                     "every hour complete: yes", "stopped; data and logs kept"):
        assert expected in out, out[-3000:]
    report = json.loads((tmp_path / "demo" / "last-report.json").read_text())
    books = report["books"]
    assert len(books) == 3 * 2 and all(b["complete"] for b in books)
    assert sum(b["produced"] for b in books) == 3000 == sum(b["loaded"] for b in books)
    assert all(b["duplicates"] == 0 for b in books)
    assert report["top_pages"], "the analyst query returned nothing"
    # nothing is left running
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "demo") not in ps

    second = _demo(tmp_path, "--seed", "8", "--events", "500")
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    assert "exists (reusing" in second.stdout
    report2 = json.loads((tmp_path / "demo" / "last-report.json").read_text())
    books2 = report2["books"]
    assert books2 and all(b["complete"] and b["duplicates"] == 0 for b in books2)
    # more than the first run's 3000 (unless an hour boundary passed between the runs and shifted the window)
    assert sum(b["produced"] for b in books2) == sum(b["loaded"] for b in books2) > 500
