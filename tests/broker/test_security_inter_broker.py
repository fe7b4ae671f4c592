"""Brokers replicating to each other over an SSL inter-broker listener with client certificates required
(each broker authenticates as its certificate's principal), and SASL session lifetimes (KIP-368): a client
that re-authenticates keeps its connection, one that does not is closed when its session expires."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tls_certs import make_certs  # noqa: E402

from ferry.embedded import BrokerProcess, free_port  # noqa: E402
from ferry.wire.protocol import sasl_authenticate, sasl_handshake  # noqa: E402
from ferry.wire.protocol.header import request_header  # noqa: E402
from ferry.wire.protocol.primitives import Reader  # noqa: E402
from tests.broker.raw_socket import recv_exactly  # noqa: E402


def _start(root: Path, zk: str, broker_id: int, props: Path, listeners: list[str]) -> BrokerProcess:
    extra = ["--config", str(props), "--flush-ms", "10"]
    for lst in listeners:
        extra += ["--listener", lst]
    b = BrokerProcess(broker_id, root / f"broker-{broker_id}" / "data", zk, "live", extra_args=extra)
    b.start()
    return b


@pytest.mark.slow
def test_replication_over_ssl_inter_broker_listener(zk_server, tmp_path):
    certs = make_certs(tmp_path / "certs")
    props = tmp_path / "broker.properties"
    props.write_text(f"ssl.keystore.location={certs.server}\nssl.truststore.location={certs.ca}\n"
                     "ssl.client.auth=required\ninter.broker.listener.name=SSL\n")
    zk = f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/live"
    brokers = []
    try:
        for i in (1, 2):
            brokers.append(_start(tmp_path, zk, i, props, [f"SSL://127.0.0.1:{free_port('127.0.0.1')}"]))
        logs = _replicated_in_sync(brokers, 50)
        # the followers' fetches came over TLS with the broker certificate: its principal is logged
        assert "authenticated User:CN=server,O=ferry from 127.0.0.1:" in logs and "on SSL" in logs
        # ssl.client.auth=required: a client without a certificate, or with a self-signed one, is refused
        ssl_port = brokers[0].extra_args[brokers[0].extra_args.index("--listener") + 1].rsplit(":", 1)[1]
        base = {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
                "ssl.ca.location": str(certs.ca)}
        cert, key = certs.client("eve", self_signed=True)
        for conf in (base, {**base, "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}):
            with pytest.raises(KafkaException):
                AdminClient(conf).list_topics(timeout=6)
        good, good_key = certs.client("app")
        md = AdminClient({**base, "ssl.certificate.location": str(good), "ssl.key.location": str(good_key)}
                         ).list_topics(timeout=20)
        assert sorted(md.brokers) == [1, 2]
        log1 = brokers[0].log_file.read_text()
        assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in log1 or "peer did not return a certificate" in log1
        assert "authenticated User:CN=app,OU=apps,O=ferry from" in log1
    finally:
        for b in brokers:
            b.stop()


def test_replication_over_sasl_ssl_inter_broker_listener(zk_server, tmp_path):
    """The brokers' own connections (replica fetchers) authenticate with SCRAM-SHA-512 as the user `broker`."""
    certs = make_certs(tmp_path / "certs")
    props = tmp_path / "broker.properties"
    props.write_text(f"ssl.keystore.location={certs.server}\nssl.truststore.location={certs.ca}\n"
                     "inter.broker.listener.name=SASL_SSL\ninter.broker.sasl.username=broker\n"
                     "inter.broker.sasl.password=broker-pw\n")
    zk = f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/live"
    r = subprocess.run([sys.executable, "-m", "ferry.cli", "users", "add", "broker", "--password-stdin",
                        "--zookeeper", zk], input="broker-pw\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    brokers = []
    try:
        for i in (1, 2):
            brokers.append(_start(tmp_path, zk, i, props, [f"SASL_SSL://127.0.0.1:{free_port('127.0.0.1')}"]))
        logs = _replicated_in_sync(brokers, 20)
        assert "authenticated User:broker from 127.0.0.1:" in logs and "on SASL_SSL (SCRAM-SHA-512)" in logs
        assert "broker-pw" not in logs
    finally:
        for b in brokers:
            b.stop()


def _call(s: socket.socket, key: int, version: int, corr: int, body: bytes) -> Reader:
    frame = request_header(key, version, corr, "raw") + body
    s.sendall(struct.pack(">i", len(frame)) + frame)
    size = struct.unpack(">i", recv_exactly(s, 4))[0]
    return Reader(recv_exactly(s, size)[4:])



@pytest.fixture
def reauth_broker(zk_server, tmp_path):
    props = tmp_path / "broker.properties"
    props.write_text("sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512\nconnections.max.reauth.ms=2000\n")
    zk = f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/live"
    port = free_port("127.0.0.1")
    b = _start(tmp_path, zk, 1, props, [f"SASL_PLAINTEXT://127.0.0.1:{port}"])
    r = subprocess.run([sys.executable, "-m", "ferry.cli", "users", "add", "alice", "--password-stdin",
                        "--zookeeper", zk], input="pw\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    yield b, port
    b.stop()


def test_session_expires_without_reauthentication(reauth_broker):
    b, port = reauth_broker
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        assert sasl_handshake.parse_response(_call(s, 17, 1, 1, sasl_handshake.encode_request("PLAIN")))[0] == 0
        resp = sasl_authenticate.parse_response(
            _call(s, 36, 1, 2, sasl_authenticate.encode_request(b"\0alice\0pw")), 1)
        assert resp.error_code == 0 and resp.session_lifetime_ms == 2000
        _call(s, 18, 0, 3, b"")  # served while the session lasts
        t0 = time.monotonic()
        s.settimeout(10)
        assert s.recv(1) == b""  # closed by the broker
        assert 1.0 < time.monotonic() - t0 < 4.0
    assert "its session expired without re-authentication" in b.log_file.read_text()


def test_client_reauthenticates_and_keeps_producing(reauth_broker):
    b, port = reauth_broker
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "pw",
                  "allow.auto.create.topics": True})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("reauth", 1, 1)])["reauth"].result(30)
    acked: list = []
    deadline = time.monotonic() + 6  # three session lifetimes
    i = 0
    while time.monotonic() < deadline:
        p.produce("reauth", f"m{i}".encode(), on_delivery=lambda err, msg: acked.append(err))
        p.poll(0.05)
        i += 1
    assert p.flush(30) == 0
    assert acked == [None] * i
    assert "re-authenticated User:alice from 127.0.0.1:" in b.log_file.read_text()


def _replicated_in_sync(brokers: list[BrokerProcess], messages: int) -> str:
    """A topic of 2 partitions on both brokers, ``messages`` produced with acks=all, both replicas in the ISR of
    every partition (the followers fetched over the inter-broker listener); the brokers' logs."""
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    admin.create_topics([NewTopic("replicated", 2, replication_factor=2)])["replicated"].result(timeout=30)
    p = Producer({"bootstrap.servers": brokers[0].bootstrap, "acks": "all"})
    acked: list = []
    for i in range(messages):
        p.produce("replicated", f"m{i}".encode(), partition=i % 2, on_delivery=lambda err, msg: acked.append(err))
    assert p.flush(30) == 0 and acked == [None] * messages
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics("replicated", timeout=10).topics["replicated"]
        if all(len(pm.isrs) == 2 for pm in md.partitions.values()):
            break
        time.sleep(0.2)
    assert all(len(pm.isrs) == 2 for pm in md.partitions.values()), md.partitions
    return "".join(b.log_file.read_text() for b in brokers)
