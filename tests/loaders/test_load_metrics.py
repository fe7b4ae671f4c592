"""`ferry load --metrics-file`: the textfile-collector file a run leaves, counters carried across runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ferry.loaders.load_metrics import LoadMetrics
from tests.loaders.conftest import create_topic, past_hour, produce, spread


def _samples(path) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(path.read_text()) for s in fam.samples}


def test_runs_accumulate_counters_and_describe_the_last_run(tmp_path):
    path = tmp_path / "textfile" / "ferry_load.prom"
    LoadMetrics(str(path)).succeeded({"topics": [{"topic": "page_view", "rows": 10, "bad": 1},
                                                 {"topic": "_audit", "rows": 2, "bad": 0}]})
    s = _samples(path)
    assert s[("ferry_load_rows_total", (("topic", "page_view"),))] == 10
    assert s[("ferry_load_last_run_success", ())] == 1
    assert s[("ferry_load_runs_total", (("result", "success"),))] == 1

    LoadMetrics(str(path)).failed(["page_view"])
    LoadMetrics(str(path)).succeeded({"topics": [{"topic": "page_view", "rows": 5, "bad": 0}]})
    s = _samples(path)
    assert s[("ferry_load_rows_total", (("topic", "page_view"),))] == 15  # carried over, not reset
    assert s[("ferry_load_bad_records_total", (("topic", "page_view"),))] == 1
    assert s[("ferry_load_failures_total", (("topic", "page_view"),))] == 1
    assert s[("ferry_load_runs_total", (("result", "success"),))] == 2
    assert s[("ferry_load_runs_total", (("result", "failure"),))] == 1
    assert s[("ferry_load_last_run_rows", (("topic", "page_view"),))] == 5
    assert s[("ferry_load_last_run_duration_seconds", ())] >= 0
    assert not list(path.parent.glob("*.tmp*"))  # written through a temporary file and a rename


@pytest.mark.spark
@pytest.mark.slow
def test_a_load_says_its_native_parts_and_exports_them(offline, tmp_path):
    """A real `ferry load` run: the "native parts:" start-up line the broker and the mirror log too, and
    ferry_native_enabled{part} in its textfile, 1 for the part that ran natively and 0 for the one switched off
    (FERRY_NATIVE_DISABLE: both states in one run)."""
    topic = create_topic(offline, partitions=1, prefix="nat")
    n = produce(offline, topic, spread(past_hour(2), 200))
    prom = tmp_path / "textfile" / "ferry_load.prom"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, FERRY_NATIVE_DISABLE="avro_columns")
    run = subprocess.run([sys.executable, "-m", "ferry.cli", "load", "--zookeeper", offline.zk, "--topics", topic,
                          "--state-dir", str(tmp_path / "state"), "--database", "nat", "--no-audit",
                          "--master", "local[1]", "--conf", "spark.ui.showConsoleProgress=false",
                          "--metrics-file", str(prom)], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    line = next((x for x in run.stderr.splitlines() if x.startswith("ferry load: native parts: ")), None)
    assert line is not None, run.stderr[-3000:]
    parts = dict(p.split(" ", 1) for p in line.removeprefix("ferry load: native parts: ").split(", "))
    assert parts["batch_records"] == "on"
    assert parts["avro_columns"] == "off (disabled by FERRY_NATIVE_DISABLE)"
    s = _samples(prom)
    assert s[("ferry_native_enabled", (("part", "batch_records"),))] == 1
    assert s[("ferry_native_enabled", (("part", "avro_columns"),))] == 0
    assert s[("ferry_load_rows_total", (("topic", topic),))] == n


# `ferry load` in a process where the record walk's compiled module cannot be imported (as on a host where the
# wheel was built without it); ZooKeeper on port 1 would fail the run if it got that far.
NOT_BUILT = """
import sys
class NotBuilt:
    def find_spec(self, name, path=None, target=None):
        if name == "ferry.loaders._batch_records":
            raise ImportError("No module named 'ferry.loaders._batch_records'")
sys.meta_path.insert(0, NotBuilt())
from ferry.cli import main
sys.exit(main(["load", "--zookeeper", "127.0.0.1:1/x", "--topics", "t", "--state-dir", sys.argv[1]]))
"""


def test_a_required_native_part_missing_stops_the_load_before_spark(tmp_path):
    """FERRY_REQUIRE_NATIVE=1 with a decoder that cannot load: one line, exit 1, nothing started."""
    env = dict(os.environ, FERRY_REQUIRE_NATIVE="1", FERRY_NATIVE="1")
    env.pop("FERRY_NATIVE_DISABLE", None)
    run = subprocess.run([sys.executable, "-c", NOT_BUILT, str(tmp_path / "state")], capture_output=True,
                         text=True, env=env, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stderr.startswith("ferry load: error: ferry's native part 'batch_records'"), run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "state").exists()  # nothing left behind
