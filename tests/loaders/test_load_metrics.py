"""`ferry load --metrics-file`: the textfile-collector file a run leaves, counters carried across runs."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ferry.loaders.load_metrics import LoadMetrics


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
