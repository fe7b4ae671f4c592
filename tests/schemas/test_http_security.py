"""HTTPS and authentication on ferry's HTTP surfaces, with real servers and real clients: the schema registry
(`ferry schemas serve` over HTTPS with basic authentication against the cluster's SCRAM users, writes only for
the named writers; confluent-kafka's registry client verifies the certificate), and a /metrics endpoint with
client certificates (mTLS)."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from ferry.embedded import free_port
from ferry.loaders.load_metrics import LoadMetrics
from ferry.wire.http_security import HttpSecurity
from tests.broker.tls_certs import Certs, make_certs

SCHEMA = json.dumps({"type": "record", "name": "User", "fields": [{"name": "id", "type": "long"}]})


@dataclass
class Registry:
    url: str
    certs: Certs
    log: Path

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certs.ca))

    def call(self, path: str, method: str = "GET", body: dict | None = None, user: str | None = None
             ) -> tuple[int, float]:
        """(HTTP status, seconds taken)."""
        request = urllib.request.Request(self.url + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        if user is not None:
            request.add_header("Authorization", "Basic " + base64.b64encode(user.encode()).decode())
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, context=self.context(), timeout=30) as answer:
                return answer.status, time.monotonic() - started
        except urllib.error.HTTPError as e:
            return e.code, time.monotonic() - started


def _add_user(zk_connect: str, name: str, password: str) -> None:
    run = subprocess.run([sys.executable, "-m", "ferry.cli", "users", "add", name, "--password-stdin",
                          "--zookeeper", zk_connect], input=password + "\n", capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr


@pytest.fixture
def registry(zk_connect: str, tmp_path: Path) -> Iterator[Registry]:
    certs = make_certs(tmp_path / "certs")
    _add_user(zk_connect, "ops", "ops-secret")
    _add_user(zk_connect, "analyst", "analyst-secret")
    port = free_port()
    log = tmp_path / "serve.out"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ferry.cli", "schemas", "serve", "--listen", f"127.0.0.1:{port}",
                                 "--zookeeper", zk_connect, "--https-certfile", str(certs.server_cert),
                                 "--https-keyfile", str(certs.server_key), "--http-auth", "scram",
                                 "--http-write-users", "ops"], stdout=out, stderr=subprocess.STDOUT)
    reg = Registry(f"https://127.0.0.1:{port}", certs, log)
    deadline = time.monotonic() + 60
    while True:
        try:
            if reg.call("/subjects")[0] == 401:  # up, and asking who we are
                break
        except (urllib.error.URLError, ConnectionError, ssl.SSLError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("ferry schemas serve did not start: " + log.read_text())
        time.sleep(0.1)
    yield reg
    proc.terminate()
    proc.wait(timeout=20)


def test_registry_over_https_with_scram_users_and_writers(registry: Registry) -> None:
    assert "on https://127.0.0.1" in registry.log.read_text()
    # anonymous: nothing read, nothing written
    assert registry.call("/subjects")[0] == 401
    assert registry.call("/subjects/u-value/versions", "POST", {"schema": SCHEMA})[0] == 401
    # a wrong password is refused, and refused more slowly each time (no quick guessing)
    first = registry.call("/subjects", user="ops:guess-1")
    second = registry.call("/subjects", user="ops:guess-2")
    third = registry.call("/subjects", user="ops:guess-3")
    assert (first[0], second[0], third[0]) == (401, 401, 401)
    assert first[1] >= 0.1 and third[1] >= 0.4, (first[1], third[1])  # 0.1 s, doubling per failure
    # an authenticated reader reads but may not write; the writer writes
    assert registry.call("/subjects", user="analyst:analyst-secret")[0] == 200
    assert registry.call("/subjects/u-value/versions", "POST", {"schema": SCHEMA},
                         user="analyst:analyst-secret")[0] == 403
    assert registry.call("/subjects/u-value/versions", "POST", {"schema": SCHEMA}, user="ops:ops-secret")[0] == 200
    # Confluent's own client: verifies the certificate against the CA and sends the credentials
    client = SchemaRegistryClient({"url": registry.url, "ssl.ca.location": str(registry.certs.ca),
                                   "basic.auth.user.info": "ops:ops-secret"})
    assert client.get_latest_version("u-value").schema.schema_str is not None
    client.register_schema("v-value", Schema(SCHEMA, "AVRO"))
    reader = SchemaRegistryClient({"url": registry.url, "ssl.ca.location": str(registry.certs.ca),
                                   "basic.auth.user.info": "analyst:analyst-secret"})
    assert sorted(reader.get_subjects()) == ["u-value", "v-value"]
    with pytest.raises(SchemaRegistryError) as refused:
        reader.register_schema("w-value", Schema(SCHEMA, "AVRO"))
    assert refused.value.http_status_code == 403
    # a client that does not trust the CA does not get through the handshake
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(registry.url + "/subjects", context=ssl.create_default_context(), timeout=10)
    # plain HTTP on the HTTPS port gets no answer from the registry
    with pytest.raises((urllib.error.URLError, ConnectionError, urllib.error.HTTPError)):
        urllib.request.urlopen(registry.url.replace("https:", "http:") + "/subjects", timeout=10).read()


def test_metrics_with_client_certificates(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    metrics = LoadMetrics()
    port = free_port()
    metrics.serve("127.0.0.1", port, HttpSecurity(certfile=str(certs.server_cert), keyfile=str(certs.server_key),
                                                  cafile=str(certs.ca), client_auth="required"))
    url = f"https://127.0.0.1:{port}/metrics"
    anonymous = ssl.create_default_context(cafile=str(certs.ca))
    with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
        urllib.request.urlopen(url, context=anonymous, timeout=10).read()
    prometheus = ssl.create_default_context(cafile=str(certs.ca))
    prometheus.load_cert_chain(*certs.client("prometheus"))
    body = urllib.request.urlopen(url, context=prometheus, timeout=10).read().decode()
    assert "ferry_load_running" in body
    stranger = ssl.create_default_context(cafile=str(certs.ca))
    stranger.load_cert_chain(*certs.client("stranger", self_signed=True))
    with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
        urllib.request.urlopen(url, context=stranger, timeout=10).read()


@pytest.mark.slow
def test_bad_https_settings_are_one_line_usage_errors(tmp_path: Path, zk_connect: str) -> None:
    (tmp_path / "c.pem").write_text("not checked before the settings are\n")
    for extra, message in ((["--https-keyfile", str(tmp_path / "k.pem")], "without its certificate"),
                           (["--https-certfile", str(tmp_path / "missing.pem")], "cannot read the TLS certificate"),
                           (["--https-certfile", str(tmp_path / "c.pem"), "--https-client-auth", "required"],
                            "need the CA that signs them")):
        argv = [sys.executable, "-m", "ferry.cli", "schemas", "serve", "--listen", f"127.0.0.1:{free_port()}",
                *extra, "--zookeeper", zk_connect]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
        assert run.returncode == 2 and message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
