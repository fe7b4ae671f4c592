"""The secure and the plaintext settings of the roles, rendered from the example inventory by Ansible's own
template module (seconds, no hosts): with the default ferry_security (sasl_ssl) a broker has one SASL_SSL listener,
the authorizer and its super users, an inter-broker password from the controller's secrets and /metrics over
HTTPS, and Prometheus scrapes over HTTPS as the monitor's user; with ferry_security=plaintext neither carries
any of it (what a lab inventory, e.g. one without TLS, gets). The secure deployment itself: test_ansible.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "infra" / "ansible"
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"


def render(host: str, template: str, dest: Path, secrets: Path, *extra: str) -> str:
    """`template` rendered for `host` of the example inventory, the controller's secrets kept in `secrets`."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"))
    p = subprocess.run(
        [str(VENV_BIN / "ansible"), "-i", "inventories/example", host, "-c", "local",
         "-e", "ansible_become=false", "-e", f"ansible_python_interpreter={VENV_BIN / 'python'}",
         "-e", f"ferry_secrets_dir={secrets}", *extra,
         "-m", "ansible.builtin.template", "-a", f"src={template} dest={dest}"],
        cwd=ANSIBLE, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return dest.read_text()


@pytest.mark.slow
def test_broker_properties_secure_by_default_and_plaintext_on_request(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    (secrets / "passwords").mkdir(parents=True)
    extra = ("-e", "@roles/broker/defaults/main.yml")
    secure = render("live-broker-1", "roles/broker/templates/broker.properties.j2", tmp_path / "secure", secrets,
                    *extra)
    lines = set(secure.splitlines())
    assert {"listeners=SASL_SSL://0.0.0.0:9093", "advertised.listeners=SASL_SSL://10.10.2.11:9093",
            "inter.broker.listener.name=SASL_SSL", "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "authorizer.class.name=ferry", "super.users=User:broker;User:ops", "metrics.authentication=scram",
            "ssl.keystore.location=/etc/ferry/tls/host.pem", "ssl.truststore.location=/etc/ferry/tls/ca.pem"} <= lines
    assert "PLAINTEXT://" not in secure
    password = (secrets / "passwords" / "broker").read_text().strip()  # generated on first use, on the controller
    assert len(password) == 32 and f"inter.broker.sasl.password={password}" in lines
    plain = render("live-broker-1", "roles/broker/templates/broker.properties.j2", tmp_path / "plain", secrets,
                   *extra, "-e", "ferry_security=plaintext")
    assert "listeners=PLAINTEXT://0.0.0.0:9092" in plain.splitlines()
    for word in ("SASL", "ssl.", "authorizer", "super.users", "metrics.authentication"):
        assert word not in plain, word


@pytest.mark.slow
def test_prometheus_scrapes_over_https_only_in_the_secure_setup(tmp_path: Path) -> None:
    extra = ("-e", "@group_vars/offline.yml", "-e", "@roles/prometheus/defaults/main.yml")
    template = "roles/prometheus/templates/prometheus.yml.j2"
    secure = render("offline-loader-1", template, tmp_path / "secure.yml", tmp_path, *extra)
    # brokers and dashboard (not Prometheus itself; no standalone mirror job: mirror links are the default)
    assert secure.count("scheme: https") == 2, secure
    assert secure.count("password_file: /etc/prometheus/ferry-monitor.password") == 2
    assert secure.count("ca_file: /etc/prometheus/ferry-ca.pem") == 2
    plain = render("offline-loader-1", template, tmp_path / "plain.yml", tmp_path, *extra,
                   "-e", "ferry_security=plaintext")
    for word in ("https", "basic_auth", "tls_config", "ferry-ca.pem", "password"):
        assert word not in plain, word
