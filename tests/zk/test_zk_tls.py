"""ZooKeeper over TLS (KIP-515's settings): a real ZooKeeper serving only its secureClientPort with PEM stores
from a test CA; kazoo through ferry's one connect() with the right CA reads, with a wrong CA or in plaintext it
is refused within seconds in one line; a broker registers over TLS; `ferry topics --zookeeper` with
--zk-tls-config-file lists, and without it says why not; an offline broker's mirror link reaches the live
ZooKeeper over TLS with its --source-zk-tls-config-file and copies the live topic."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.embedded import BrokerProcess
from ferry.zk.kazoo_client import connect
from ferry.zk.local_process import free_port
from ferry.zk.zk_tls import ENV_TLS_CONFIG, ZkTlsConfig, ZkTlsConfigError, ZooKeeperTlsError
from ferry.zk.zookeeper_server import ZkServerTls, ZooKeeperServer
from tests.broker.tls_certs import Certs, _openssl, make_certs
from tests.mirror.mirror_harness import produce, read_log, wait_for, wait_partitions


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("zk-tls-certs"))


@pytest.fixture(scope="module")
def tls_zk(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """ZooKeeper with its plaintext client port off: TLS only."""
    tls = ZkServerTls(port=free_port(), keystore=certs.server, truststore=certs.ca)
    server = ZooKeeperServer(port=0, data_dir=tmp_path_factory.mktemp("zk-tls"), tls=tls)
    server.start()
    yield server
    server.stop()


def _client_file(path: Path, ca: Path, **extra: str) -> Path:
    lines = ["zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
             "zookeeper.ssl.client.enable=true", f"zookeeper.ssl.truststore.location={ca}",
             "zookeeper.ssl.truststore.type=PEM", *(f"{k}={v}" for k, v in extra.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def _chroot(server: ZooKeeperServer) -> str:
    return f"{server.secure_connect}/t/{uuid.uuid4().hex[:12]}"


def test_right_ca_reads_and_writes(tls_zk: ZooKeeperServer, certs: Certs, tmp_path: Path) -> None:
    tls = ZkTlsConfig.from_file(str(_client_file(tmp_path / "zk-tls.properties", certs.ca)))
    client = connect(_chroot(tls_zk), timeout=10, tls=tls)
    try:
        client.create("/hello", b"over tls")
        assert client.get("/hello")[0] == b"over tls"
        assert client.connected and client.use_ssl
    finally:
        client.stop()
        client.close()


def test_wrong_ca_and_plaintext_are_refused_fast(tls_zk: ZooKeeperServer, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other.key", "-out", "other.pem",
             "-days", "2", "-subj", "/CN=another CA", cwd=tmp_path)
    wrong = ZkTlsConfig.from_file(str(_client_file(tmp_path / "wrong.properties", tmp_path / "other.pem")))
    started = time.monotonic()
    with pytest.raises(ZooKeeperTlsError, match=r"TLS handshake with ZooKeeper at 127\.0\.0\.1:\d+ failed: "
                                                r"unable to get local issuer certificate"):
        connect(_chroot(tls_zk), timeout=20, tls=wrong)
    assert time.monotonic() - started < 8  # not the 20 s timeout
    monkeypatch.delenv(ENV_TLS_CONFIG, raising=False)
    started = time.monotonic()
    with pytest.raises(ZooKeeperTlsError, match="speaks TLS and this client does not"):
        connect(_chroot(tls_zk), timeout=20)
    assert time.monotonic() - started < 8


def test_tls_client_on_a_plaintext_port_and_bad_settings(zk_server: ZooKeeperServer, certs: Certs,
                                                        tmp_path: Path) -> None:
    tls = ZkTlsConfig.from_file(str(_client_file(tmp_path / "zk-tls.properties", certs.ca)))
    with pytest.raises(ZooKeeperTlsError, match="is that port ZooKeeper's secureClientPort"):
        connect(f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}", timeout=20, tls=tls)
    with pytest.raises(ZkTlsConfigError, match="reads PEM files only"):
        ZkTlsConfig.from_properties({"zookeeper.ssl.client.enable": "true",
                                     "zookeeper.ssl.truststore.type": "JKS"})
    with pytest.raises(ZkTlsConfigError, match="truststore.location .*missing or unreadable"):
        ZkTlsConfig.from_properties({"zookeeper.ssl.client.enable": "true",
                                     "zookeeper.ssl.truststore.location": str(tmp_path / "nope.pem")})
    assert ZkTlsConfig.from_properties({"zookeeper.connect": "x:1"}) is None  # TLS only when enabled
    with pytest.raises(ZkTlsConfigError, match="cannot read the ZooKeeper TLS config file"):
        ZkTlsConfig.from_file(str(tmp_path / "missing.properties"))


@pytest.mark.slow
def test_broker_registers_over_tls_and_topics_command_reads(tls_zk: ZooKeeperServer, zk_server: ZooKeeperServer,
                                                            certs: Certs, tmp_path: Path) -> None:
    zk = _chroot(tls_zk)
    props = _client_file(tmp_path / "broker.properties", certs.ca)
    broker = BrokerProcess(1, tmp_path / "broker-1", zk, "live", extra_args=("--config", str(props)),
                           zk_tls=ZkTlsConfig.from_file(str(props)))
    try:
        broker.start()
        client = connect(zk, timeout=10, tls=ZkTlsConfig.from_file(str(props)))
        try:
            assert client.get_children("/brokers/ids") == ["1"]
        finally:
            client.stop()
            client.close()
        tool = _client_file(tmp_path / "zk-tls.properties", certs.ca)
        env = {k: v for k, v in os.environ.items() if k != ENV_TLS_CONFIG}
        ferry = [sys.executable, "-m", "ferry.cli"]
        created = subprocess.run([*ferry, "topics", "create", "events", "--partitions", "2",
                                  "--replication-factor", "1", "--zookeeper", zk, "--zk-tls-config-file",
                                  str(tool)], capture_output=True, text=True, timeout=60, env=env)
        assert created.returncode == 0, created.stderr
        listed = subprocess.run([*ferry, "topics", "list", "--zookeeper", zk, "--zk-tls-config-file", str(tool)],
                                capture_output=True, text=True, timeout=60, env=env)
        assert listed.returncode == 0 and "events" in listed.stdout.split(), listed.stderr
        plain = subprocess.run([*ferry, "topics", "list", "--zookeeper", zk], capture_output=True, text=True,
                               timeout=60, env=env)
        assert plain.returncode == 1
        assert plain.stderr.strip().count("\n") == 0 and "speaks TLS and this client does not" in plain.stderr
        assert "Traceback" not in plain.stderr
        # an offline broker on another (plaintext) ZooKeeper runs a mirror link whose live ZooKeeper is the TLS one
        wait_partitions(broker.bootstrap, "events", 2)
        expected = produce(broker.bootstrap, "events", 2, 200)
        offline_zk = f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}"
        offline = BrokerProcess(101, tmp_path / "broker-101", offline_zk, "offline")
        try:
            offline.start()
            bad = subprocess.run([*ferry, "mirror", "link", "create", "dc1", "--zookeeper", offline_zk,
                                  "--source-zookeeper", zk, "--include", "events", "--source-zk-tls-config-file",
                                  str(tmp_path / "missing.properties")], capture_output=True, text=True, timeout=60,
                                 env=env)
            assert bad.returncode == 2 and "cannot read the ZooKeeper TLS config file" in bad.stderr, bad.stderr
            made = subprocess.run([*ferry, "mirror", "link", "create", "dc1", "--zookeeper", offline_zk,
                                   "--source-zookeeper", zk, "--include", "events", "--source-zk-tls-config-file",
                                   str(tool)], capture_output=True, text=True, timeout=60, env=env)
            assert made.returncode == 0, made.stderr
            wait_partitions(offline.bootstrap, "events", 2, timeout=60)
            wait_for(lambda: read_log(offline.bootstrap, {"events": 2}, timeout=20) ==
                     read_log(broker.bootstrap, {"events": 2}, timeout=20), 90, "the offline copy over TLS")
            assert sum(len(r) for r in read_log(offline.bootstrap, {"events": 2}).values()) == sum(expected.values()) == 200
        finally:
            offline.stop()
    finally:
        broker.stop()


@pytest.mark.slow
def test_ferry_zookeeper_serves_tls_only(certs: Certs, tmp_path: Path) -> None:
    ferry = [sys.executable, "-m", "ferry.cli", "zookeeper", "--data-dir", str(tmp_path / "zk")]
    usage = subprocess.run([*ferry, "--secure-port", str(free_port()), "--ssl-truststore", str(certs.ca)],
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and usage.stderr.strip() == \
        "ferry zookeeper: error: --secure-port needs --ssl-keystore FILE (PEM)"
    assert not (tmp_path / "zk").exists()
    port = free_port()
    proc = subprocess.Popen([*ferry, "--port", "0", "--secure-port", str(port), "--ssl-keystore", str(certs.server),
                             "--ssl-truststore", str(certs.ca)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        tls = ZkTlsConfig.from_file(str(_client_file(tmp_path / "zk-tls.properties", certs.ca)))
        client = connect(f"127.0.0.1:{port}", timeout=30, tls=tls)
        try:
            client.create("/over-tls", b"yes")
            assert client.get("/over-tls")[0] == b"yes"
        finally:
            client.stop()
            client.close()
        cfg = (tmp_path / "zk" / "zoo.cfg").read_text()
        assert f"secureClientPort={port}" in cfg and "clientPort=" not in cfg.replace("secureClientPort", "")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
