"""`ferry demo --short --chaos` kills the offline broker that copies through the mirror link (or, with
`--mirror standalone`, the mirror process) with -9 three times while the events are published and copied, and still ends with every hour complete, 0 duplicates and the mirror
tier equal to the producers'."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


KILLED = {"link": "chaos: offline broker 101 (copying for mirror link live) killed with -9",
          "standalone": "chaos: mirror killed with -9"}
RESUMED = {"link": r"chaos: the restarted offline broker's leaders resumed (\d+) partition copies from the offline "
                   r"log, (\d+) of them past live offset 0",
           "standalone": r"chaos: the restarted mirrors synced (\d+) partitions from the offline log; (\d+) had"}


@pytest.mark.timeout(1500)  # one demo run (up to 1200 s: Spark and Airflow on a busy machine) and a refused one
@pytest.mark.parametrize("kind", ["link", "standalone"])
def test_demo_chaos_books_stay_exact(tmp_path: Path, kind: str) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    run = subprocess.run([sys.executable, "-m", "ferry.cli", "demo", "--short", "--chaos", "--mirror", kind,
                          "--dir", str(tmp_path / "demo"), "--seed", "11"],
                         capture_output=True, text=True, timeout=1200, env=env)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert run.stdout.count(KILLED[kind]) == 3, run.stdout[-3000:]
    assert "every hour complete: yes" in run.stdout
    books = json.loads((tmp_path / "demo" / "last-report.json").read_text())["books"]
    assert books and all(b["complete"] and b["duplicates"] == 0 for b in books), books
    assert sum(b["produced"] for b in books) == 3000 == sum(b["loaded"] for b in books)
    assert all(b["mirrored"] == b["produced"] for b in books), books  # the mirror tier counted each once
    summary = [m for m in map(re.compile(RESUMED[kind]).search, run.stdout.splitlines()) if m]
    assert summary, run.stdout[-3000:]
    if kind == "link":  # the restarted broker's leaders went on from the offline log
        assert int(summary[0].group(1)) > 0, summary[0].group(0)
    print(summary[0].group(0))
    if kind == "link":  # the directory keeps its kind: a switch would copy everything again
        switch = subprocess.run([sys.executable, "-m", "ferry.cli", "demo", "--short", "--mirror", "standalone",
                                 "--dir", str(tmp_path / "demo")], capture_output=True, text=True, timeout=120, env=env)
        assert switch.returncode == 2 and "was run with --mirror link" in switch.stderr, switch.stderr[-2000:]
        assert "Traceback" not in switch.stderr
