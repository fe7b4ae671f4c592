"""TLS and SASL listeners with real clients and real handshakes: one broker with PLAINTEXT, SSL (client
certificates requested), SASL_SSL and SASL_PLAINTEXT listeners; users made with `ferry users`; certificates made
with openssl. Refusals (wrong password, unknown user, plaintext on a TLS port, TLS on a plaintext port, a
truncated handshake, a wrong-CA certificate) leave the broker serving the others."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tls_certs import make_certs  # noqa: E402

from ferry.embedded import BrokerProcess, free_port  # noqa: E402
from tests.broker.raw_socket import recv_exactly  # noqa: E402

PASSWORD = "s3cret-pw"


def _users(zk: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferry.cli", "users", *args, "--zookeeper", zk], input=stdin,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def secure(zk_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("security")
    certs = make_certs(root / "certs")
    zk = f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/live"
    ports = {name: free_port("127.0.0.1") for name in ("SSL", "SASL_SSL", "SASL_PLAINTEXT")}
    props = root / "security.properties"
    props.write_text(f"ssl.keystore.type=PEM\nssl.keystore.location={certs.server}\n"
                     f"ssl.truststore.location={certs.ca}\nssl.client.auth=requested\n"
                     "ssl.principal.mapping.rules=RULE:^CN=([^,]*),OU=ops,O=ferry$/$1-ops/L,DEFAULT\n"
                     "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n"
                     "connections.max.reauth.ms=60000\n"
                     "connection.failed.authentication.delay.ms=200\n"
                     "connection.failed.authentication.delay.max.ms=3000\n")
    extra = ["--config", str(props), "--auto-create-topics", "--flush-ms", "10"]
    for name, port in ports.items():
        extra += ["--listener", f"{name}://127.0.0.1:{port}"]
    broker = BrokerProcess(1, root / "broker-1" / "data", zk, "live", extra_args=extra)
    broker.start()
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        r = _users(zk, "add", "alice", "--mechanism", mech, "--password-stdin", stdin=PASSWORD + "\n")
        assert r.returncode == 0, r.stderr
    yield {"broker": broker, "certs": certs, "zk": zk, "ports": ports, "plain": broker.bootstrap}
    broker.stop()


def _log(secure) -> str:
    return secure["broker"].log_file.read_text()


def _roundtrip(conf: dict, topic: str, n: int = 20) -> list[bytes]:
    """Produce n messages and read them back with the same client settings; returns the values read."""
    p = Producer({**conf, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, f"m{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


def _ssl_conf(secure) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{secure['ports']['SSL']}", "security.protocol": "SSL",
            "ssl.ca.location": str(secure["certs"].ca)}


def _sasl_conf(secure, listener: str, mechanism: str, password: str = PASSWORD, user: str = "alice") -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{secure['ports'][listener]}", "security.protocol": listener,
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    if listener == "SASL_SSL":
        conf["ssl.ca.location"] = str(secure["certs"].ca)
    return conf


def test_confluent_over_ssl(secure):
    assert _roundtrip(_ssl_conf(secure), "t-ssl") == [f"m{i}".encode() for i in range(20)]


def test_large_requests_and_fetches_through_tls(secure):
    """Produce requests of ~1 MB (received into their own buffer, through TLS) and fetches of several MB."""
    import hashlib
    values = [hashlib.sha256(str(i).encode()).digest() * 128 for i in range(600)]  # 4 KB each
    p = Producer({**_ssl_conf(secure), "linger.ms": 200, "batch.size": 1_000_000})
    for v in values:
        p.produce("t-large", v)
    assert p.flush(60) == 0
    c = Consumer({**_sasl_conf(secure, "SASL_SSL", "SCRAM-SHA-512"), "group.id": "g-large",
                  "auto.offset.reset": "earliest", "fetch.max.bytes": 8_000_000})
    c.subscribe(["t-large"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(values) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == values


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_over_sasl_ssl_scram(secure, mechanism):
    topic = f"t-scram-{mechanism[-3:]}"
    assert _roundtrip(_sasl_conf(secure, "SASL_SSL", mechanism), topic) == [f"m{i}".encode() for i in range(20)]
    assert "authenticated User:alice from 127.0.0.1:" in _log(secure)


def test_confluent_over_sasl_plaintext_plain(secure):
    assert len(_roundtrip(_sasl_conf(secure, "SASL_PLAINTEXT", "PLAIN"), "t-plain")) == 20
    assert "on SASL_PLAINTEXT (PLAIN)" in _log(secure)


def test_metadata_advertises_the_listener_the_client_came_in_on(secure):
    for conf, port in ((_ssl_conf(secure), secure["ports"]["SSL"]),
                       (_sasl_conf(secure, "SASL_SSL", "SCRAM-SHA-512"), secure["ports"]["SASL_SSL"]),
                       ({"bootstrap.servers": secure["plain"]}, secure["broker"].port)):
        md = AdminClient(conf).list_topics(timeout=20)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", port)]


def test_registration_carries_every_endpoint(secure):
    import json

    from kazoo.client import KazooClient
    hosts, _, chroot = secure["zk"].partition("/")
    zk = KazooClient(hosts=hosts)
    zk.start(10)
    try:
        doc = json.loads(zk.get(f"/{chroot}/brokers/ids/1")[0])
    finally:
        zk.stop()
    p = secure["ports"]
    assert sorted(doc["endpoints"]) == sorted([f"PLAINTEXT://{secure['plain']}", f"SSL://127.0.0.1:{p['SSL']}",
                                               f"SASL_SSL://127.0.0.1:{p['SASL_SSL']}",
                                               f"SASL_PLAINTEXT://127.0.0.1:{p['SASL_PLAINTEXT']}"])
    assert doc["listener_security_protocol_map"]["SASL_SSL"] == "SASL_SSL"


def test_mtls_principal_from_the_certificate(secure):
    cert, key = secure["certs"].client("Bob", ou="ops")
    conf = {**_ssl_conf(secure), "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    AdminClient(conf).list_topics(timeout=20)
    # RULE:^CN=([^,]*),OU=ops,O=ferry$/$1-ops/L maps the subject to bob-ops
    assert "authenticated User:bob-ops from 127.0.0.1:" in _log(secure)
    cert2, key2 = secure["certs"].client("carol", ou="apps")
    conf = {**_ssl_conf(secure), "ssl.certificate.location": str(cert2), "ssl.key.location": str(key2)}
    AdminClient(conf).list_topics(timeout=20)
    assert "authenticated User:CN=carol,OU=apps,O=ferry from" in _log(secure)  # DEFAULT: the whole DN


def test_wrong_password_and_unknown_user_refused(secure):
    for conf in (_sasl_conf(secure, "SASL_SSL", "SCRAM-SHA-512", password="wrong"),
                 _sasl_conf(secure, "SASL_SSL", "SCRAM-SHA-256", user="mallory"),
                 _sasl_conf(secure, "SASL_PLAINTEXT", "PLAIN", password="wrong")):
        p = Producer({**conf, "message.timeout.ms": 5000})
        errors: list = []
        p.produce("t-denied", b"x", on_delivery=lambda err, msg, errors=errors: errors.append(err))
        p.flush(15)
        assert errors and errors[0] is not None
    log = _log(secure)
    assert "failed authentication from 127.0.0.1:" in log and "user 'mallory'" in log
    # the broker still serves the others
    assert len(_roundtrip(_sasl_conf(secure, "SASL_SSL", "SCRAM-SHA-512"), "t-after-refusals", 5)) == 5


def _raw_sasl_plain(port: int, user: str, password: str, source: str = "127.0.0.1"):
    """SaslHandshake v1 + SaslAuthenticate v1 PLAIN by hand from ``source``: (error code, seconds until the
    answer, the answer)."""
    import struct

    from ferry.wire.protocol import sasl_authenticate, sasl_handshake
    from ferry.wire.protocol.header import request_header
    from ferry.wire.protocol.primitives import Reader

    def call(s, key, version, corr, body):
        frame = request_header(key, version, corr, "raw") + body
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        return Reader(recv_exactly(s, size)[4:])

    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as s:
        code, _ = sasl_handshake.parse_response(call(s, 17, 1, 1, sasl_handshake.encode_request("PLAIN")))
        assert code == 0
        t0 = time.monotonic()
        resp = sasl_authenticate.parse_response(
            call(s, 36, 1, 2, sasl_authenticate.encode_request(f"\0{user}\0{password}".encode())), 1)
        took = time.monotonic() - t0
        if resp.error_code:
            assert s.recv(1) == b""  # closed after the failure
        return resp.error_code, took, resp



def test_brute_force_is_slowed(secure):
    port = secure["ports"]["SASL_PLAINTEXT"]
    delays = []
    for _ in range(4):  # from an address no other test uses: its own count of failures
        code, took, resp = _raw_sasl_plain(port, "alice", "guess", source="127.0.0.2")
        assert code == 58 and "invalid credentials" in resp.error_message
        delays.append(took)
    # 200 ms doubling per failure from this address: 0.2, 0.4, 0.8, 1.6 s
    assert 0.15 < delays[0] < 0.6 and delays[3] > 1.4 and delays[3] > 2 * delays[1], delays
    assert "failed authentication from 127.0.0.2:" in _log(secure)
    code, _took, resp = _raw_sasl_plain(port, "alice", PASSWORD, source="127.0.0.3")
    assert code == 0 and resp.session_lifetime_ms == 60000  # connections.max.reauth.ms (KIP-368)


def test_sasl_authenticate_v2_flexible(secure):
    """SaslAuthenticate v2 (request header v2, compact bytes, tagged fields), as Java clients send it."""
    import struct

    from ferry.wire.protocol import sasl_authenticate, sasl_handshake
    from ferry.wire.protocol.header import request_header
    from ferry.wire.protocol.primitives import Reader

    def frame(key: int, version: int, corr: int, body: bytes) -> bytes:
        f = request_header(key, version, corr, "java") + body
        return struct.pack(">i", len(f)) + f

    for password, code in ((PASSWORD, 0), ("nope", 58)):
        with socket.create_connection(("127.0.0.1", secure["ports"]["SASL_PLAINTEXT"]), timeout=10,
                                      source_address=("127.0.0.6", 0)) as s:
            s.sendall(frame(17, 1, 1, sasl_handshake.encode_request("PLAIN")))
            size = struct.unpack(">i", recv_exactly(s, 4))[0]
            assert sasl_handshake.parse_response(Reader(recv_exactly(s, size)[4:]))[0] == 0
            token = f"\0alice\0{password}".encode()
            body = b"\x00" + bytes([len(token) + 1]) + token + b"\x00"  # header tags, compact bytes, tags
            s.sendall(frame(36, 2, 2, body))
            size = struct.unpack(">i", recv_exactly(s, 4))[0]
            answer = recv_exactly(s, size)
            assert answer[:4] == struct.pack(">i", 2)
            resp = sasl_authenticate.parse_response(Reader(answer[4:]), 2)
            assert resp.error_code == code
            assert resp.session_lifetime_ms == (60000 if code == 0 else 0)
            if code:
                assert "invalid credentials" in resp.error_message


def test_sasl_handshake_v0_raw_tokens(secure):
    """A v0 handshake (clients before Kafka 1.0): the PLAIN token follows as a raw frame, answered raw."""
    import struct

    from ferry.wire.protocol import sasl_handshake
    from ferry.wire.protocol.header import request_header
    for password, ok in ((PASSWORD, True), ("wrong", False)):
        with socket.create_connection(("127.0.0.1", secure["ports"]["SASL_PLAINTEXT"]), timeout=10,
                                      source_address=("127.0.0.4", 0)) as s:
            frame = request_header(17, 0, 7, "raw") + sasl_handshake.encode_request("PLAIN")
            s.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", recv_exactly(s, 4))[0]
            assert recv_exactly(s, size)[4:6] == b"\x00\x00"
            token = f"\0alice\0{password}".encode()
            s.sendall(struct.pack(">i", len(token)) + token)
            if ok:
                assert struct.unpack(">i", recv_exactly(s, 4))[0] == 0  # an empty raw answer: authenticated
                frame = request_header(18, 0, 8, "raw")  # ApiVersions now served
                s.sendall(struct.pack(">i", len(frame)) + frame)
                size = struct.unpack(">i", recv_exactly(s, 4))[0]
                assert recv_exactly(s, size)[:4] == struct.pack(">i", 8)
            else:
                assert s.recv(4) == b""  # closed without an answer (v0)


def test_unsupported_mechanism_and_sasl_on_a_plaintext_listener(secure):
    import struct

    from ferry.wire.protocol import sasl_handshake
    from ferry.wire.protocol.header import request_header
    from ferry.wire.protocol.primitives import Reader

    def handshake(port: int, mechanism: str) -> tuple[int, list[str], bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            frame = request_header(17, 1, 1, "raw") + sasl_handshake.encode_request(mechanism)
            s.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", recv_exactly(s, 4))[0]
            code, mechanisms = sasl_handshake.parse_response(Reader(recv_exactly(s, size)[4:]))
            s.settimeout(5)
            try:
                after = s.recv(1)
            except TimeoutError:
                after = b"open"
            return code, mechanisms, after

    code, mechanisms, after = handshake(secure["ports"]["SASL_PLAINTEXT"], "GSSAPI")
    assert code == 33 and mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] and after == b""
    code, mechanisms, after = handshake(secure["broker"].port, "PLAIN")  # no SASL on PLAINTEXT
    assert code == 34 and after == b"open"


def test_requests_before_authentication_close_the_connection(secure):
    import struct

    from ferry.wire.protocol.header import request_header
    with socket.create_connection(("127.0.0.1", secure["ports"]["SASL_PLAINTEXT"]), timeout=10) as s:
        frame = request_header(3, 1, 1, "raw") + struct.pack(">i", 0)  # Metadata, no topics
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert s.recv(10) == b""
    assert "before SASL authentication" in _log(secure)


def test_plaintext_on_tls_port_and_tls_on_plaintext_port(secure):
    # ApiVersions in the clear on the TLS port: at most a TLS alert comes back, never a Kafka answer
    with socket.create_connection(("127.0.0.1", secure["ports"]["SSL"]), timeout=10) as s:
        s.sendall(b"\x00\x00\x00\x0a" + b"\x00\x12\x00\x00" + b"\x00\x00\x00\x01" + b"\xff\xff")
        try:
            answer = s.recv(100)
        except ConnectionResetError:
            answer = b""
        assert not answer or answer[0] == 0x15, answer  # 0x15: a TLS alert record
    # a TLS client on the plaintext port: the handshake fails
    ctx = ssl.create_default_context(cafile=str(secure["certs"].ca))
    with socket.create_connection(("127.0.0.1", secure["broker"].port), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    # truncated handshake: half a ClientHello, then the client goes away
    with socket.create_connection(("127.0.0.1", secure["ports"]["SASL_SSL"]), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    time.sleep(0.5)
    assert "refused a connection from 127.0.0.1:" in _log(secure)
    assert len(_roundtrip(_ssl_conf(secure), "t-after-garbage", 5)) == 5
    assert len(_roundtrip({"bootstrap.servers": secure["plain"]}, "t-after-garbage-plain", 5)) == 5


def test_wrong_ca_client_certificate_refused(secure, tmp_path):
    cert, key = secure["certs"].client("eve", self_signed=True)
    conf = {**_ssl_conf(secure), "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    with pytest.raises(KafkaException):
        AdminClient(conf).list_topics(timeout=8)
    assert "CERTIFICATE_VERIFY_FAILED" in _log(secure).split("refused a connection")[-1]
    cert, key = secure["certs"].client("old", expired=True)
    conf = {**_ssl_conf(secure), "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    with pytest.raises(KafkaException):
        AdminClient(conf).list_topics(timeout=8)
    assert "CERTIFICATE_VERIFY_FAILED" in _log(secure).split("refused a connection")[-1]
    assert "User:CN=old" not in _log(secure)


def test_kcat_over_sasl_ssl_and_ssl(secure):
    conf = _sasl_conf(secure, "SASL_SSL", "SCRAM-SHA-512")
    x = [a for k, v in conf.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    r = subprocess.run(["kcat", "-b", conf["bootstrap.servers"], *x, "-P", "-t", "t-kcat"], input="k1\nk2\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ssl_conf = _ssl_conf(secure)
    r = subprocess.run(["kcat", "-b", ssl_conf["bootstrap.servers"], "-X", "security.protocol=SSL", "-X",
                        f"ssl.ca.location={secure['certs'].ca}", "-C", "-t", "t-kcat", "-o", "beginning", "-e", "-q"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["k1", "k2"], r.stderr


def test_kafka_python_and_aiokafka(secure):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from kafka import KafkaConsumer, KafkaProducer

    ca = str(secure["certs"].ca)
    kp = dict(bootstrap_servers=f"127.0.0.1:{secure['ports']['SASL_SSL']}", security_protocol="SASL_SSL",
              sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice", sasl_plain_password=PASSWORD,
              ssl_cafile=ca)
    prod = KafkaProducer(**kp)
    for i in range(5):
        prod.send("t-kpy", f"v{i}".encode()).get(timeout=30)
    prod.close()
    cons = KafkaConsumer("t-kpy", auto_offset_reset="earliest", consumer_timeout_ms=10000, **kp)
    assert [m.value for m in cons][:5] == [f"v{i}".encode() for i in range(5)]
    cons.close()

    async def aio() -> list[bytes]:
        ctx = create_ssl_context(cafile=ca)
        kw = dict(bootstrap_servers=f"127.0.0.1:{secure['ports']['SSL']}", security_protocol="SSL", ssl_context=ctx)
        p = AIOKafkaProducer(**kw)
        await p.start()
        try:
            for i in range(5):
                await p.send_and_wait("t-aio", f"a{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer("t-aio", auto_offset_reset="earliest", **kw)
        await c.start()
        try:
            out = []
            async with asyncio.timeout(30):
                async for m in c:
                    out.append(m.value)
                    if len(out) == 5:
                        return out
        finally:
            await c.stop()
        return out

    assert asyncio.run(aio()) == [f"a{i}".encode() for i in range(5)]

    async def aio_scram() -> None:
        p = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{secure['ports']['SASL_SSL']}",
                             security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                             sasl_plain_username="alice", sasl_plain_password=PASSWORD,
                             ssl_context=create_ssl_context(cafile=ca))
        await p.start()
        try:
            await p.send_and_wait("t-aio-scram", b"scram")
        finally:
            await p.stop()

    asyncio.run(aio_scram())
    # kafka-python with a client certificate (mTLS) and over SASL_PLAINTEXT with PLAIN
    cert, key = secure["certs"].client("kpy", ou="ops")
    prod = KafkaProducer(bootstrap_servers=f"127.0.0.1:{secure['ports']['SSL']}", security_protocol="SSL",
                         ssl_cafile=ca, ssl_certfile=str(cert), ssl_keyfile=str(key))
    prod.send("t-kpy-mtls", b"x").get(timeout=30)
    prod.close()
    prod = KafkaProducer(bootstrap_servers=f"127.0.0.1:{secure['ports']['SASL_PLAINTEXT']}",
                         security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username="alice",
                         sasl_plain_password=PASSWORD)
    prod.send("t-kpy-plain", b"x").get(timeout=30)
    prod.close()
    log = _log(secure)
    assert "authenticated User:kpy-ops from" in log and "on SASL_SSL (SCRAM-SHA-512)" in log


def test_users_command(secure):
    zk = secure["zk"]
    r = _users(zk, "list", "--json")
    assert r.returncode == 0 and '"alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"]' in r.stdout
    r = _users(zk, "add", "bob")  # no terminal, no password source: refused, nothing stored
    assert r.returncode == 2 and "--password-file" in r.stderr
    r = _users(zk, "remove", "nobody")
    assert r.returncode == 2 and "no user" in r.stderr  # a name that does not exist: exit 2 (docs/cli.md)
    assert PASSWORD not in r.stdout


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_garbage_and_fuzzed_sasl_frames_do_not_hurt(secure):
    """Hundreds of connections of TLS garbage, random frames before authentication and random SASL tokens:
    the broker stays up, its memory does not grow with them, and it serves a real client afterwards."""
    import random
    import struct

    from ferry.wire.protocol import sasl_authenticate, sasl_handshake
    from ferry.wire.protocol.header import request_header

    rng = random.Random(38)
    pid = secure["broker"].pid
    ports = secure["ports"]
    before = _rss_kb(pid)
    for i in range(600):
        kind = i % 3
        port = ports["SSL"] if kind == 0 else ports["SASL_PLAINTEXT"]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.5", 0)) as s:
                if kind == 0:  # TLS garbage, sometimes shaped like a record header
                    head = b"\x16\x03\x03" if rng.random() < 0.5 else b""
                    s.sendall(head + rng.randbytes(rng.randrange(1, 3000)))
                elif kind == 1:  # a random frame before authentication
                    body = rng.randbytes(rng.randrange(0, 200))
                    s.sendall(struct.pack(">i", rng.choice([len(body), rng.randrange(-5, 1 << 30)])) + body)
                else:  # a real handshake, then a random SCRAM token
                    frame = request_header(17, 1, 1, "fuzz") + sasl_handshake.encode_request("SCRAM-SHA-256")
                    token = rng.choice([rng.randbytes(rng.randrange(0, 300)), b"n,,n=alice,r=" + rng.randbytes(20)])
                    frame2 = request_header(36, rng.choice([0, 1, 2]), 2, "fuzz") + \
                        sasl_authenticate.encode_request(token)
                    s.sendall(struct.pack(">i", len(frame)) + frame + struct.pack(">i", len(frame2)) + frame2)
        except OSError:
            pass  # refused or reset: what garbage deserves
    time.sleep(4)  # the delayed failure answers run out (connection.failed.authentication.delay.max.ms=3000)
    assert secure["broker"].running
    assert _rss_kb(pid) - before < 40_000, (before, _rss_kb(pid))
    assert len(_roundtrip(_sasl_conf(secure, "SASL_SSL", "SCRAM-SHA-256"), "t-after-fuzz", 5)) == 5
    assert len(_roundtrip(_ssl_conf(secure), "t-after-fuzz-ssl", 5)) == 5


def _served_certificate_cn(port: int, ca: Path) -> str:
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return dict(x[0] for x in tls.getpeercert()["subject"])["commonName"]


def test_certificate_reloaded_without_restart(secure):
    """Last in this module: it replaces the broker's certificate (same CA and addresses, a new subject)."""
    from tls_certs import issue_server

    certs, port = secure["certs"], secure["ports"]["SSL"]
    assert _served_certificate_cn(port, certs.ca) == "server"
    renewed = issue_server(certs.dir, "renewed")
    renewed.replace(certs.server)  # atomically, as a renewal job would
    deadline = time.monotonic() + 10
    while _served_certificate_cn(port, certs.ca) != "renewed" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _served_certificate_cn(port, certs.ca) == "renewed"
    assert "TLS certificate reloaded" in _log(secure)
    # a broken file: the previous certificate goes on being served, and the broker says why
    certs.server.write_text("not a certificate\n")
    assert _served_certificate_cn(port, certs.ca) == "renewed"
    assert "cannot be loaded" in _log(secure)
    assert len(_roundtrip(_ssl_conf(secure), "t-after-reload", 5)) == 5
