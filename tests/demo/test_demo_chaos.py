"""`ferry demo --short --chaos` kills the mirror with -9 three times while the events are published and
copied, and still ends with every hour complete, 0 duplicates and the mirror tier equal to the producers'."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_demo_chaos_books_stay_exact(tmp_path: Path) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    run = subprocess.run([sys.executable, "-m", "ferry.cli", "demo", "--short", "--chaos",
                          "--dir", str(tmp_path / "demo"), "--seed", "11"],
                         capture_output=True, text=True, timeout=1200, env=env)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert run.stdout.count("chaos: mirror killed with -9") == 3, run.stdout[-3000:]
    assert "every hour complete: yes" in run.stdout
    books = json.loads((tmp_path / "demo" / "last-report.json").read_text())["books"]
    assert books and all(b["complete"] and b["duplicates"] == 0 for b in books), books
    assert sum(b["produced"] for b in books) == 3000 == sum(b["loaded"] for b in books)
    assert all(b["mirrored"] == b["produced"] for b in books), books  # the mirror tier counted each once
    summary = [ln for ln in run.stdout.splitlines() if "chaos: the restarted mirrors synced" in ln]
    assert summary, run.stdout[-3000:]  # the restarts synced from the offline log
    print(summary[0])
