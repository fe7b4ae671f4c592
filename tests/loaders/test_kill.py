"""SIGKILL a real `ferry load` process (its JVM and Python workers too) while it writes, then run it again:
no loss, no duplicates. Separate processes, because each owns its embedded Derby metastore."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.loaders.conftest import COUNT_SCRIPT, create_topic, past_hour, produce, spread

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _load_cmd(offline, topic: str, state: Path) -> list[str]:
    return [sys.executable, "-m", "ferry.cli", "load", "--zookeeper", offline.zk, "--topics", topic,
            "--state-dir", str(state), "--database", "k", "--max-per-split", "500", "--master", "local[2]",
            "--conf", "spark.ui.showConsoleProgress=false"]


def test_killed_load_reruns_without_loss_or_duplicates(offline, tmp_path: Path):
    topic = create_topic(offline, partitions=2, prefix="kill")
    n = produce(offline, topic, spread(past_hour(3), 3000, 2 * 3_600_000))
    state = tmp_path / "state"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    log = open(tmp_path / "killed.out", "w")  # noqa: SIM115
    proc = subprocess.Popen(_load_cmd(offline, topic, state), stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    table_root = state / "warehouse" / "k" / topic
    deadline = time.monotonic() + 400
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if list(table_root.glob("dt=*/hr=*/ferry_run=*/*.parquet")):
                break  # the run's partition versions are on disk; the ledger commit is next
            time.sleep(0.05)
        assert proc.poll() is None, "the load finished before it could be killed: " + (tmp_path / "killed.out").read_text()[-2000:]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        log.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    ledger = json.loads((state / "ledger.json").read_text())
    committed = {k: v for k, v in ledger["offsets"].items() if k == topic}
    killed_before_commit = not committed
    assert ledger["in_flight"] or not killed_before_commit

    rerun = subprocess.run(_load_cmd(offline, topic, state), capture_output=True, text=True, env=env, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    if killed_before_commit:
        assert "never committed: removed its" in rerun.stdout
    assert f"{topic} " in rerun.stdout and "complete (produced" in rerun.stdout
    assert "incomplete" not in rerun.stdout, rerun.stdout[-3000:]
    assert not list(table_root.glob("_temporary"))

    count = subprocess.run([sys.executable, "-c", COUNT_SCRIPT, str(state), "k", topic], capture_output=True,
                           text=True, env=env, timeout=600)
    line = next(x for x in count.stdout.splitlines() if x.startswith("RESULT "))
    assert json.loads(line[len("RESULT "):]) == {"rows": n, "distinct": n}
