"""The Prometheus alert rules in infra/ansible/prometheus: valid (`promtool check rules`) and doing what they
say on made-up series (`promtool test rules`). promtool comes with Debian's prometheus package."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "infra" / "ansible" / "prometheus"


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
    assert "SUCCESS: 11 rules found" in r.stdout + r.stderr


def test_rules_fire_on_their_conditions(promtool):
    r = subprocess.run([promtool, "test", "rules", "ferry_alerts_test.yml"], cwd=RULES, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_the_issue_asks_for_exists():
    text = (RULES / "ferry_alerts.yml").read_text()
    for needle in ("ferry_mirror_lag_messages", "ferry_audit_oldest_incomplete_hour_age_seconds",
                   "ferry_broker_under_replicated_partitions", 'up{job="ferry-broker"} == 0',
                   "ferry_load_oldest_unfinished_run_age_seconds", "ferry_load_last_run_failed == 1"):
        assert needle in text, needle
