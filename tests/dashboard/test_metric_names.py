"""Metric names follow Prometheus' conventions (base units in the name, `_total` on counters, no `_count` on
a gauge): `promtool check metrics` (Debian's prometheus package) over what the dashboard's `/metrics`, a
broker, the mirror and a load's textfile export, each with samples in every family; and the dashboard's
load metrics over a ledger that holds a committed and a failed run."""

from __future__ import annotations

import shutil
import subprocess
import time
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from ferry.dashboard.app import create_app
from ferry.dashboard.sources import AuditSnapshot, Sources
from ferry.loaders.ledger import Ledger


class LedgerOnly(Sources):
    """No cluster (every read fails fast and is shown); the ledger of ``state_dir``."""

    def __init__(self, state_dir: str) -> None:
        super().__init__("127.0.0.1:1/offline", [], state_dir, offline_only=True, timeout_s=0.5, ttl_s=0)

    def audit(self) -> AuditSnapshot:
        return AuditSnapshot(read_at=time.time())

    def clusters(self) -> dict:
        return {"clusters": [{"zookeeper": self.zookeeper, "error": "unreachable", "brokers": []}]}


def _ledger(tmp_path, fail_last: bool) -> str:
    ledger = Ledger(tmp_path / "state")
    with ledger.lock():
        ledger.begin("ok", ["/wh/t"])
        ledger.commit({"run_id": "ok", "rows": 5, "started": time.time() - 60,
                       "ranges": [{"topic": "t", "partition": 0, "start": 0, "end": 5}], "hours": {"t": [["2024-05-01", "10"]]}})
        if fail_last:
            ledger.begin("bad", ["/wh/t"])
            ledger.fail("bad", "BadRecordsError: t/0@5: not Avro", started=time.time() - 5, stage="topics",
                        hours={"t": [["2024-05-01", "11"]]}, topics=["t"], messages=1)
    return str(ledger.state_dir)


def test_dashboard_load_metrics_follow_the_ledger(tmp_path):
    client = TestClient(create_app(LedgerOnly(_ledger(tmp_path, fail_last=True))))
    text = client.get("/metrics").text
    for line in ("ferry_load_failed_runs_total 1.0", "ferry_load_last_run_failed 1.0", "ferry_load_unfinished_runs 0.0",
                 "ferry_load_ledger_readable 1.0"):
        assert line in text, line
    loads = client.get("/api/loads").json()
    assert [(r["run_id"], r["result"]) for r in loads["runs"]] == [("bad", "failed"), ("ok", "committed")]
    assert loads["runs"][0]["hours_touched"] == ["t 2024-05-01 11:00"] and loads["unfinished"] == []
    assert loads["runs"][0]["error"] == "BadRecordsError: t/0@5: not Avro"
    page = client.get("/loads").text
    assert "failed" in page and "/api/loads" in page

    # a later run commits: the alert's metric clears, the count stays
    ledger = Ledger(tmp_path / "state")
    with ledger.lock():
        ledger.abandon("bad")  # what the next run's recovery does
        ledger.begin("ok2", ["/wh/t"])
        ledger.commit({"run_id": "ok2", "rows": 1, "ranges": [{"topic": "t", "partition": 0, "start": 5, "end": 6}]})
    text = client.get("/metrics").text
    assert "ferry_load_last_run_failed 0.0" in text and "ferry_load_failed_runs_total 1.0" in text


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is missing: Debian's prometheus package (scripts/setup.sh)")
    return tool


def _lint(text: str, what: str) -> None:
    p = subprocess.run([_promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"{what}: {p.stdout}{p.stderr}"


def test_dashboard_metric_names(tmp_path):
    text = TestClient(create_app(LedgerOnly(_ledger(tmp_path, fail_last=True)))).get("/metrics").text
    assert "ferry_load_failed_runs_total" in text
    _lint(text, "dashboard /metrics")


def test_load_metric_names(tmp_path):
    from ferry.loaders.load_metrics import LoadMetrics

    path = tmp_path / "ferry_load.prom"
    LoadMetrics(str(path)).succeeded({"topics": [{"topic": "t", "rows": 5, "bad": 1}]})
    LoadMetrics(str(path)).failed(["t"])
    text = path.read_text()
    assert 'ferry_load_failures_total{topic="t"} 1.0' in text and 'ferry_load_rows_total{topic="t"} 5.0' in text
    _lint(text, "ferry load --metrics-file")


def test_mirror_metric_names():
    from ferry.mirror.metrics import MirrorMetrics

    m = MirrorMetrics()
    m.lag.labels("t", "0").set(3)
    m.committed.labels("t", "0").set(10)
    for c in (m.messages, m.bytes, m.data_lost, m.offset_resets):
        c.labels("t").inc()
    m.syncs.labels("takeover").inc()
    m.error("fetch")
    m.owned.set(1)
    m.rebalances.inc()
    _lint(generate_latest(m.registry).decode(), "ferry mirror --metrics-listen")


def test_broker_metric_names():
    from ferry.broker.server.broker_metrics import BrokerCollector
    from ferry.broker.server.request_metrics import RequestMetrics

    latency = Histogram("ferry_broker_replication_commit_seconds", "append to HW", registry=None)
    latency.observe(0.002)
    part = SimpleNamespace(is_leader=True, isr=[1], min_isr=1, leader=1)
    replicas = SimpleNamespace(partitions={("t", 0): part}, under_replicated=lambda: 0, commit_latency=latency,
                               isr_shrinks=1, isr_expands=1)
    controller = SimpleNamespace(active=True, states=SimpleNamespace(states={("t", 0): (SimpleNamespace(leader=1), 0)}),
                                 elections=2)
    requests = RequestMetrics()
    for slots in (requests.requests, requests.bytes_in, requests.bytes_out, requests.errors):
        slots[0] = 3  # Produce
    requests.produce_bytes["t"] = 100
    requests.fetch_bytes["t"] = 100
    reg = CollectorRegistry()
    reg.register(BrokerCollector(1, replicas, controller, requests=requests))
    text = generate_latest(reg).decode()
    assert "ferry_broker_requests_total" in text and "ferry_controller_leader_elections_total" in text
    _lint(text, "broker metrics.listen")
