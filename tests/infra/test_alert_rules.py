"""The Prometheus alert rules in infra/ansible/prometheus: valid (`promtool check rules`) and doing what they
say on made-up series (`promtool test rules`). promtool comes with Debian's prometheus package."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "infra" / "ansible" / "prometheus"
GRAFANA = RULES.parent / "roles" / "prometheus" / "files" / "ferry-brokers.grafana.json"


@pytest.fixture
def promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is missing: Debian's prometheus package (scripts/setup.sh)")
    return tool


def test_rules_are_valid(promtool):
    r = subprocess.run([promtool, "check", "rules", "ferry_alerts.yml"], cwd=RULES, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 18 rules found" in r.stdout + r.stderr


def test_rules_fire_on_their_conditions(promtool):
    r = subprocess.run([promtool, "test", "rules", "ferry_alerts_test.yml"], cwd=RULES, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_the_issue_asks_for_exists():
    text = (RULES / "ferry_alerts.yml").read_text()
    for needle in ("ferry_mirror_lag_messages", "ferry_audit_oldest_incomplete_hour_age_seconds",
                   "ferry_broker_under_replicated_partitions", 'up{job="ferry-broker"} == 0',
                   "ferry_load_oldest_unfinished_run_age_seconds", "ferry_load_last_run_failed == 1",
                   "ferry_broker_under_min_isr_partitions > 0", "ferry_controller_offline_partitions > 0",
                   "ferry_request_total_time_seconds_bucket{api=\"Produce\"}",
                   # the embedded mirror's links (issue 39): failed, lagging, paused for long, data lost
                   "ferry_mirror_link_failed", "ferry_mirror_link_lag_seconds) > 600", "ferry_mirror_link_paused",
                   "ferry_mirror_link_data_lost_messages_total"):
        assert needle in text, needle


def test_grafana_dashboard_queries_are_valid_promql(promtool, tmp_path):
    """Every query of the Grafana dashboard parses (promtool checks them as recording rules, with Grafana's
    variables given values); that every metric they name is served: tests/broker/test_broker_metrics.py."""
    board = json.loads(GRAFANA.read_text())
    assert board["uid"] == "ferry-brokers" and board["templating"]["list"]
    rules = []
    for panel in board["panels"]:
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            expr = t["expr"].replace("$__rate_interval", "1m").replace("$instance", ".*")
            rules.append({"record": f"ferry:panel_{panel['id']}_{t['refId'].lower()}", "expr": expr})
    path = tmp_path / "panels.yml"
    path.write_text(json.dumps({"groups": [{"name": "grafana", "rules": rules}]}))  # JSON is YAML
    r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules)} rules found" in r.stdout + r.stderr
