"""Prometheus metrics of `ferry load` runs: rows, bad records and failures per topic, run duration.

A load is a batch job that exits when done, and there is no pushgateway: a scrape of the process would
usually miss the run's end. So the primary export is a node_exporter textfile-collector file
(``--metrics-file``, e.g. /var/lib/node_exporter/textfile/ferry_load.prom), rewritten atomically at the end
of every run. Counters (`_total`) are carried over from the previous file, so they grow across runs as
Prometheus expects of a counter; the `ferry_load_last_run_*` gauges describe the latest run, and
`ferry_native_enabled{part}` which of the loader's native parts (record walk, Avro decoding) it ran.
``--metrics-listen`` additionally serves the same metrics while the run lasts (`ferry_load_running` 1), for
long loads watched live.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app, write_to_textfile
from prometheus_client.parser import text_string_to_metric_families

from ferry.wire import native
from ferry.wire.http_security import HttpSecurity, serve_wsgi

CARRIED = ("ferry_load_rows", "ferry_load_bad_records", "ferry_load_failures", "ferry_load_runs")


class LoadMetrics:
    """One run's metrics, on top of the counters a previous run left in ``path`` (if any)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = Path(path) if path else None
        self.registry = r = CollectorRegistry()
        self.rows = Counter("ferry_load_rows", "rows written to the warehouse tables", ["topic"], registry=r)
        self.bad = Counter("ferry_load_bad_records", "records dropped as undecodable (--skip-bad-records)",
                           ["topic"], registry=r)
        self.failures = Counter("ferry_load_failures", "failed runs, per topic the run was loading",
                                ["topic"], registry=r)
        self.runs = Counter("ferry_load_runs", "runs by result", ["result"], registry=r)
        self.last_rows = Gauge("ferry_load_last_run_rows", "rows the latest run wrote", ["topic"], registry=r)
        self.duration = Gauge("ferry_load_last_run_duration_seconds", "wall-clock time of the latest run",
                              registry=r)
        self.finished = Gauge("ferry_load_last_run_timestamp_seconds", "when the latest run ended", registry=r)
        self.success = Gauge("ferry_load_last_run_success", "1 if the latest run committed, else 0", registry=r)
        self.running = Gauge("ferry_load_running", "1 while a run is in progress (served by --metrics-listen)",
                             registry=r)
        native.register_metrics(r)  # ferry_native_enabled{part}: which decoders ran natively
        self._started = time.monotonic()
        self._carry_over()

    def _carry_over(self) -> None:
        """Start the counters at the previous file's values: a textfile counter must not restart per run."""
        if self.path is None or not self.path.exists():
            return
        counters = {"ferry_load_rows": self.rows, "ferry_load_bad_records": self.bad,
                    "ferry_load_failures": self.failures, "ferry_load_runs": self.runs}
        try:
            families = list(text_string_to_metric_families(self.path.read_text()))
        except (OSError, ValueError):
            return  # unreadable: start from zero (Prometheus sees a counter reset, which it handles)
        for fam in families:
            counter = counters.get(fam.name)
            if counter is None:
                continue
            for s in fam.samples:
                if s.name.endswith("_total") and s.value > 0:
                    counter.labels(*s.labels.values()).inc(s.value)

    def serve(self, host: str, port: int, security: HttpSecurity | None = None) -> None:
        serve_wsgi(make_wsgi_app(self.registry), host, port, security or HttpSecurity())
        self.running.set(1)

    def succeeded(self, result: dict) -> None:
        """Record a committed run from its result (LoadResult.to_dict())."""
        for t in result.get("topics", []):
            self.rows.labels(t["topic"]).inc(t["rows"])
            self.last_rows.labels(t["topic"]).set(t["rows"])
            if t.get("bad"):
                self.bad.labels(t["topic"]).inc(t["bad"])
        self._end(True)

    def failed(self, topics: list[str]) -> None:
        for topic in topics:
            self.failures.labels(topic).inc()
        self._end(False)

    def _end(self, ok: bool) -> None:
        self.runs.labels("success" if ok else "failure").inc()
        self.success.set(1 if ok else 0)
        self.duration.set(time.monotonic() - self._started)
        self.finished.set(time.time())
        self.running.set(0)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_to_textfile(os.fspath(self.path), self.registry)  # tmp file + rename: never half-written
