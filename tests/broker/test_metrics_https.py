"""The broker's /metrics over HTTPS with basic authentication against the cluster's SCRAM users (a real broker,
a real TLS handshake); a setting that cannot work stops the broker at once with one line."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from ferry.embedded import free_port, wait_for_port
from tests.broker.tls_certs import make_certs


def _get(url: str, context: ssl.SSLContext, user: str | None = None) -> int:
    request = urllib.request.Request(url)
    if user:
        request.add_header("Authorization", "Basic " + base64.b64encode(user.encode()).decode())
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            body = answer.read().decode()
            assert "ferry_native_enabled" in body
            return answer.status
    except urllib.error.HTTPError as e:
        return e.code


def test_broker_metrics_over_https_with_scram_users(cluster_factory, tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    port = free_port()
    cluster = cluster_factory(n_brokers=0)
    added = subprocess.run([sys.executable, "-m", "ferry.cli", "users", "add", "prometheus", "--password-stdin",
                            "--zookeeper", cluster.zk_connect], input="scrape-secret\n", capture_output=True,
                           text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    cluster.add_broker(extra_args=(
        "--metrics-listen", f"127.0.0.1:{port}",
        "--override", f"metrics.ssl.certificate.location={certs.server_cert}",
        "--override", f"metrics.ssl.key.location={certs.server_key}",
        "--override", "metrics.authentication=scram"))
    url = f"https://127.0.0.1:{port}/metrics"
    context = ssl.create_default_context(cafile=str(certs.ca))
    wait_for_port("127.0.0.1", port, 60)  # /metrics comes up after the broker has registered
    assert _get(url, context) == 401
    assert _get(url, context, "prometheus:wrong") == 401
    assert _get(url, context, "prometheus:scrape-secret") == 200


def test_broker_refuses_metrics_settings_that_cannot_work(zk_connect: str, tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "ferry.cli", "broker", "--id", "1", "--listen",
                          f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "data"), "--zookeeper", zk_connect,
                          "--datacenter", "dc", "--override", "metrics.ssl.key.location=/nonexistent.pem"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "without its certificate" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and not (tmp_path / "data").exists()
