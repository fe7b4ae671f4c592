"""The Prometheus role's files, rendered from the example inventory by Ansible's own template module: the
scrape configuration lists every broker of both datacenters (the offline ones carry the mirror links'
metrics), the standalone mirror only when ferry_mirror_kind says so, and the dashboard, and promtool
accepts it with ferry's alert rules; the dashboard's unit points at the offline and live ZooKeepers.
(Converging the role on containers and finding every target up: tests/infra/test_ansible.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "infra" / "ansible"
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"


def _render(template: str, dest: Path, *extra: str) -> str:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"))
    p = subprocess.run(
        [str(VENV_BIN / "ansible"), "-i", "inventories/example", "offline-loader-1", "-c", "local",
         "-e", "ansible_become=false", "-e", f"ansible_python_interpreter={VENV_BIN / 'python'}",
         "-e", "@group_vars/all.yml", "-e", "@group_vars/offline.yml", "-e", "@roles/prometheus/defaults/main.yml",
         *extra, "-m", "ansible.builtin.template", "-a", f"src=roles/prometheus/templates/{template}.j2 dest={dest}"],
        cwd=ANSIBLE, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return dest.read_text()


@pytest.mark.slow
def test_scrape_config_covers_every_component(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is missing: Debian's prometheus package (scripts/setup.sh)")
    text = _render("prometheus.yml", tmp_path / "prometheus.yml")
    for target in ("live-broker-1:9308", "live-broker-2:9308", "offline-broker-1:9308", "offline-broker-2:9308",
                   "127.0.0.1:8500"):
        assert f'"{target}"' in text, target
    # mirror links by default: the mirror group's hosts run no mirror, so they are no target
    assert "offline-mirror-1" not in text and "ferry-mirror" not in text
    standalone = _render("prometheus.yml", tmp_path / "standalone.yml", "-e", "ferry_mirror_kind=standalone")
    assert '"offline-mirror-1:9309"' in standalone and "job_name: ferry-mirror" in standalone
    shutil.copy(ANSIBLE / "prometheus" / "ferry_alerts.yml", tmp_path / "ferry_alerts.yml")
    (tmp_path / "check.yml").write_text(text.replace("/etc/prometheus/rules/*.yml", str(tmp_path / "ferry_alerts.yml")))
    p = subprocess.run([promtool, "check", "config", str(tmp_path / "check.yml")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.slow
def test_dashboard_unit(tmp_path):
    unit = _render("ferry-dashboard.service", tmp_path / "ferry-dashboard.service")
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    # ZooKeeper over TLS (the secure default): its TLS port, and the client TLS settings in the unit's environment
    assert "ferry dashboard --zookeeper offline-zk-1:2281/ferry/offline" in start
    assert "--live-zookeeper live-zk-1:2281,live-zk-2:2281,live-zk-3:2281/ferry/live" in start
    assert "Environment=FERRY_ZOOKEEPER_TLS_CONFIG=/etc/ferry/zk-tls.properties" in unit.splitlines()
    assert "--state-dir /var/lib/ferry/load --listen 0.0.0.0:8500" in start
    assert start.endswith("--prometheus-url http://offline-loader-1:9090/")  # the pages link to Prometheus
