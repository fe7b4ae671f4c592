"""`ferry dashboard` as a process (how `ferry demo --keep-running` runs it): it listens, serves its pages,
and keeps serving while no cluster answers — the JSON says which one is unreachable."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from ferry.dashboard.cli import parse_listen
from ferry.dashboard.process import start_dashboard
from ferry.embedded import free_port


def test_serves_while_zookeeper_is_unreachable(tmp_path):
    port = free_port()
    proc = start_dashboard(tmp_path / "dashboard.out", "127.0.0.1:1/offline", ["127.0.0.1:1/live"], None,
                           "127.0.0.1", port)
    base = f"http://127.0.0.1:{port}"
    try:
        page = urllib.request.urlopen(base + "/", timeout=10).read().decode()
        assert "Completeness" in page and "<script>" in page
        doc = json.loads(urllib.request.urlopen(base + "/api/clusters", timeout=30).read())
        assert all(c["error"] for c in doc["clusters"])
        loads = json.loads(urllib.request.urlopen(base + "/api/loads", timeout=10).read())
        assert "--state-dir" in loads["error"]
        try:
            urllib.request.urlopen(base + "/api/completeness?to=never", timeout=10)
            raise AssertionError("a bad 'to' was accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 400 and "never" in json.loads(e.read())["error"]
        assert proc.running
    finally:
        proc.stop()


def test_parse_listen():
    assert parse_listen("0.0.0.0:8500") == ("0.0.0.0", 8500)
    assert parse_listen(":0") == ("127.0.0.1", 0)
    for bad in ("8500", "host:port", "h:70000"):
        try:
            parse_listen(bad)
            raise AssertionError(bad)
        except ValueError:
            pass


@pytest.mark.slow
def test_no_live_cluster_is_refused_unless_offline_only():
    """Completeness from the live counts is the only default: no --live-zookeeper and no --offline-only is one
    line and exit 2 before anything listens (the dashboard never silently judges from the offline counts)."""
    def dashboard(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ferry.cli", "dashboard", "--zookeeper", "127.0.0.1:1/x",
                               "--listen", "127.0.0.1:1", *args], capture_output=True, text=True, timeout=60)

    r = dashboard()
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("ferry dashboard: error: no --live-zookeeper") and "--offline-only" in r.stderr
    r = dashboard("--offline-only", "--live-zookeeper", "127.0.0.1:1/live")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--offline-only with --live-zookeeper" in r.stderr


def test_offline_only_is_said_on_the_page(tmp_path):
    port = free_port()
    proc = start_dashboard(tmp_path / "dashboard.out", "127.0.0.1:1/offline", [], None, "127.0.0.1", port,
                           offline_only=True)
    try:
        doc = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/completeness", timeout=30).read())
        assert doc["completeness"] == "offline-only" and doc["error"]  # nothing listens: unreadable, and said
    finally:
        proc.stop()
