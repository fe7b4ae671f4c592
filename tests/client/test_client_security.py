"""ferry's own clients on secured listeners (docs/security.md "Clients and tools"): the blocking BrokerConnection
and WireClient over SASL_SSL (SCRAM) and SSL with a client certificate, configured from --command-config files
(ClientConfig); the audited Producer, the ConsumerConnector and the other consumers over SASL_SSL; `ferry produce`
/ `ferry consume` through --command-config and $FERRY_CLIENT_CONFIG. A wrong password, an unknown CA and a bad
file are refused in one line; the password shows up in no output, no error and no process list."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from secure_cluster import add_user, start_secure_cluster  # noqa: E402

from ferry.client.consumer_connector import ConsumerConnector  # noqa: E402
from ferry.client.kafka_groups import KafkaGroups  # noqa: E402
from ferry.client.message_set_consumer import MessageSetConsumer  # noqa: E402
from ferry.client.message_set_producer import MessageSetProducer  # noqa: E402
from ferry.client.producer import Producer  # noqa: E402
from ferry.client.simple_consumer import SimpleConsumer  # noqa: E402
from ferry.client.wire_client import WireClient  # noqa: E402
from ferry.wire.client_config import ClientConfig, ClientConfigError  # noqa: E402
from ferry.wire.sasl_login import AuthenticationError, SaslLoginError  # noqa: E402
from ferry.zk import ClusterRegistry  # noqa: E402

PASSWORD = "cl1ent-Secret-pw"


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    cluster = start_secure_cluster(zk_server.connect, tmp_path_factory.mktemp("clientsec"))
    add_user(cluster.zk, "alice", PASSWORD)
    add_user(cluster.zk, "alice256", PASSWORD, "SCRAM-SHA-256")
    with ClusterRegistry(cluster.zk) as reg:
        for name, partitions in (("_audit", 1), ("cli-sasl", 2), ("cli-mtls", 1), ("cli-env", 1)):
            reg.create_topic(name, partitions, None, 1)
    yield cluster
    cluster.stop()


def _metadata_brokers(config: ClientConfig, bootstrap: str) -> dict[int, tuple[str, int]]:
    client = WireClient(bootstrap, "t", timeout_s=15, security=config.security())
    try:
        client.refresh_metadata([])
        return dict(client.brokers)
    finally:
        client.close()


@pytest.mark.parametrize("user,mechanism", [("alice", "SCRAM-SHA-512"), ("alice256", "SCRAM-SHA-256")])
def test_wire_client_over_sasl_ssl_scram(secured, user, mechanism):
    config = ClientConfig.from_file(secured.sasl_ssl_config(user, PASSWORD, mechanism))
    brokers = _metadata_brokers(config, secured.bootstrap("SASL_SSL"))
    assert brokers == {1: ("127.0.0.1", secured.ports[0]["SASL_SSL"])}  # the listener it came in on


def test_wire_client_over_ssl_with_a_client_certificate(secured):
    config = ClientConfig.from_file(secured.mtls_config("carol"))
    assert _metadata_brokers(config, secured.bootstrap("SSL")) == {1: ("127.0.0.1", secured.ports[0]["SSL"])}


def test_wrong_password_is_an_authentication_error_without_the_password(secured):
    config = ClientConfig.from_file(secured.sasl_ssl_config("alice", "not-the-pw-42"))
    with pytest.raises(SaslLoginError) as e:
        _metadata_brokers(config, secured.bootstrap("SASL_SSL"))
    assert "alice" in str(e.value) and "not-the-pw-42" not in str(e.value)
    assert "not-the-pw-42" not in repr(config) and "not-the-pw-42" not in repr(config.security())


def test_unknown_ca_refused_in_the_handshake(secured, tmp_path):
    other = tmp_path / "other-ca.pem"
    import subprocess
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "k"),
                    "-out", str(other), "-days", "1", "-subj", "/CN=other"], check=True, capture_output=True)
    config = ClientConfig({"security.protocol": "SSL", "ssl.ca.location": str(other)})
    with pytest.raises(AuthenticationError, match="TLS handshake with broker .* failed"):
        _metadata_brokers(config, secured.bootstrap("SSL"))


def test_config_sources_and_bad_files(tmp_path):
    path = tmp_path / "c.properties"
    path.write_text("# a comment\nsecurity.protocol = sasl_ssl\nsasl.mechanisms=SCRAM-SHA-256\n"
                    "sasl.username: bob\nsasl.password=pw=with=equals\n")
    config = ClientConfig.from_sources(None, {"FERRY_CLIENT_CONFIG": str(path)})
    assert config.security_protocol == "SASL_SSL" and config.get("sasl.mechanism") == "SCRAM-SHA-256"
    assert config.get("sasl.password") == "pw=with=equals"
    assert "pw=with=equals" not in repr(config) and "[hidden]" in repr(config)
    assert config.librdkafka()["sasl.username"] == "bob"
    assert ClientConfig.from_sources(None, {}).is_plaintext
    assert pickle.loads(pickle.dumps(config)) == config
    again = tmp_path / "again.properties"
    config.write_private(again)
    assert os.stat(again).st_mode & 0o777 == 0o600 and ClientConfig.from_file(again).properties == config.properties
    jaas = tmp_path / "java.properties"
    jaas.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka."
                    'common.security.plain.PlainLoginModule required username="dan" password="d-pw";\n')
    assert ClientConfig.from_file(jaas).security().sasl.username == "dan"
    assert "librdkafka" and "sasl.jaas.config" not in ClientConfig.from_file(jaas).librdkafka()
    for text, problem in [("security.protocol=TLS\n", "security.protocol 'TLS'"),
                          ("security.protocol=SASL_SSL\nsasl.username=x\n", "needs sasl.password"),
                          ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.username=x\nsasl.password=y\n",
                           "sasl.mechanism 'GSSAPI'"),
                          ("enable.ssl.certificate.verification=maybe\n", "expected true or false"),
                          ("just a line\n", ":1: expected key=value")]:
        path.write_text(text)
        with pytest.raises(ClientConfigError, match=problem):
            ClientConfig.from_file(path)
    with pytest.raises(ClientConfigError, match="No such file"):
        ClientConfig.from_sources(str(tmp_path / "missing.properties"))
    path.write_text("security.protocol=SSL\nssl.ca.location=/nonexistent/ca.pem\n")
    with pytest.raises(ClientConfigError, match="cannot load the TLS files"):
        ClientConfig.from_file(path).security()
    path.write_text("security.protocol=SSL\nssl.keystore.location=/etc/ferry/client.p12\n")
    with pytest.raises(ClientConfigError, match="ssl.keystore.location is not read by ferry's own clients"):
        ClientConfig.from_file(path).security()


def test_producer_and_consumer_connector_over_sasl_ssl(secured):
    """The audited Producer and the ZooKeeper-coordinated ConsumerConnector find the brokers in ZooKeeper and
    reach them on their SASL_SSL listeners; the message-set consumer and the simple consumer read the same."""
    config = ClientConfig.from_file(secured.sasl_ssl_config("alice", PASSWORD))
    with ClusterRegistry(secured.zk) as reg:
        reg.create_topic("secure-events", 2, None, 1)
    values = [f"v{i}".encode() for i in range(60)]
    with Producer(zookeeper=secured.zk, application="sec-app", client_config=config, audit_interval_s=1.0) as p:
        assert p.bootstrap == secured.bootstrap("SASL_SSL")
        for i, v in enumerate(values):
            p.send("secure-events", v, partition=i % 2)
        assert p.flush(30) == 0
    connector = ConsumerConnector("secure-group", secured.zk, consumer_timeout_s=2.0, client_config=config)
    try:
        [stream] = connector.create_message_streams({"secure-events": 1})["secure-events"]
        got = [m.value for m in stream]
    finally:
        connector.shutdown()
    assert sorted(got) == sorted(values)
    with SimpleConsumer(zookeeper=secured.zk, client_config=config) as c:
        assert c.watermarks("secure-events", 0) == (0, 30)
    consumer = MessageSetConsumer(None, "secure-events", 1, zookeeper=secured.zk, stop_at_end=True,
                                  client_config=config)
    try:
        assert sum(1 for _ in consumer) == 30
    finally:
        consumer.close()
    with ClusterRegistry(secured.zk) as reg:
        brokers = reg.brokers()
    with KafkaGroups(brokers, client_config=config) as groups:
        assert groups._conn(1).connect() and groups._conn(1).address == secured.bootstrap("SASL_SSL")
    # the producer's audit counts, read back by `ferry audit report` through the same settings
    r = ferry("audit", "report", "--zookeeper", secured.zk, "--offline-only", "--hours", "0", "--json",
              "--command-config", str(secured.sasl_ssl_config("alice", PASSWORD)))
    assert r.returncode == 0, r.stderr
    produced = sum(h["produced"] for h in json.loads(r.stdout)["hours"] if h["topic"] == "secure-events")
    assert produced == len(values)



def test_large_pipelined_sets_through_tls(secured):
    """Message sets of about 1 MB, several in flight, produced and fetched over SSL with a client certificate:
    requests written in pieces and answers read across many TLS records (the mirror's traffic)."""
    config = ClientConfig.from_file(secured.mtls_config("frank"))
    with ClusterRegistry(secured.zk) as reg:
        reg.create_topic("tls-large", 1, None, 1)
    values = [bytes([65 + i % 26]) * 1000 + str(i).encode() for i in range(4000)]
    producer = MessageSetProducer(zookeeper=secured.zk, acks=-1, max_in_flight=4, client_config=config)
    try:
        for start in range(0, len(values), 1000):
            producer.send("tls-large", 0, values[start:start + 1000])
        producer.flush()
    finally:
        producer.close()
    consumer = MessageSetConsumer(None, "tls-large", 0, zookeeper=secured.zk, stop_at_end=True,
                                  max_bytes=3 << 20, client_config=config)
    try:
        assert [r.value for r in consumer] == values
    finally:
        consumer.close()


def test_sessions_are_renewed_before_the_broker_ends_them(zk_server, tmp_path):
    """connections.max.reauth.ms (KIP-368): a long-lived wire connection logs in again between requests before
    its session runs out, so the broker never has to close it."""
    cluster = start_secure_cluster(zk_server.connect, tmp_path / "reauth",
                                   extra_props="connections.max.reauth.ms=3000\n")
    try:
        add_user(cluster.zk, "alice", PASSWORD)
        client = WireClient(cluster.bootstrap("SASL_SSL"), "t", timeout_s=15,
                            security=ClientConfig.from_file(cluster.sasl_ssl_config("alice", PASSWORD)).security())
        try:
            client.refresh_metadata([])
            conn = client.connection(1)
            deadline = time.monotonic() + 8.0
            while time.monotonic() < deadline:  # several session lifetimes of requests on one connection
                client.refresh_metadata([])
                assert conn.connected
                time.sleep(0.1)
            time.sleep(3.5)  # idle past the session's end: the broker closed it; the next request connects again
            client.refresh_metadata([])
        finally:
            client.close()
        log = cluster.brokers[0].log_file.read_text()
        assert log.count("re-authenticated User:alice") >= 2
        assert log.count("expired without re-authentication") == 1  # the idle one, after the renewals
    finally:
        cluster.stop()

# ---------------------------------------------------------------------------------- the console commands

def ferry(*args: str, stdin: str | None = None, env: dict[str, str] | None = None, cwd: Path | None = None
          ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferry.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})}, cwd=cwd)


def _roundtrip(secured, topic: str, flags: list[str], env: dict[str, str] | None = None, group: bool = False
               ) -> list[str]:
    lines = [f"{topic}-{i}" for i in range(25)]
    r = ferry("produce", "--zookeeper", secured.zk, "--topic", topic, *flags, stdin="\n".join(lines) + "\n",
              env=env)
    assert r.returncode == 0, r.stderr
    assert "25 of 25 message(s) acknowledged" in r.stderr
    read = ["--group", f"g-{topic}"] if group else []
    r = ferry("consume", "--zookeeper", secured.zk, "--topic", topic, "--from-beginning", "--max-messages", "25",
              "--timeout", "20", *read, *flags, env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(lines)
    return lines


def test_round_trip_over_sasl_ssl_scram_512_with_command_config(secured):
    config = secured.sasl_ssl_config("alice", PASSWORD)
    _roundtrip(secured, "cli-sasl", ["--command-config", str(config)], group=True)
    # the group's log ends come from the brokers, through the same settings
    r = ferry("groups", "describe", "--group", "g-cli-sasl", "--zookeeper", secured.zk, "--json",
              "--command-config", str(config))
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["partitions"]
    assert sorted(row["partition"] for row in rows) == [0, 1]
    assert sum(row["log_end"] for row in rows) == 25 and all(row["lag"] == 0 for row in rows)
    # Kafka's console tools' spellings work too
    r = ferry("consume", "--bootstrap-server", secured.bootstrap("SASL_SSL"), "--topic", "cli-sasl",
              "--from-beginning", "--max-messages", "25", "--timeout", "20", "--consumer.config", str(config))
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.split()) == 25


def test_round_trip_over_ssl_with_a_client_certificate(secured):
    _roundtrip(secured, "cli-mtls", ["--command-config",
                                     str(secured.mtls_config("erin"))])


def test_round_trip_with_the_environment_variable(secured):
    env = {"FERRY_CLIENT_CONFIG": str(secured.sasl_ssl_config("alice", PASSWORD))}
    _roundtrip(secured, "cli-env", [], env=env)


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_wrong_password_one_line_exit_1_password_never_shown(secured, tmp_path, command):
    wrong = "Wr0ng-Password-xyz"
    config = secured.sasl_ssl_config("alice", wrong)
    r = ferry(command, "--zookeeper", secured.zk, "--topic", "cli-sasl", "--command-config", str(config),
              "--timeout", "10", stdin="x\n", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ferry {command}: error: ") and "Traceback" not in r.stderr
    assert "SASL authentication as alice failed" in lines[0]
    assert wrong not in r.stderr + r.stdout and list(tmp_path.iterdir()) == []


def test_missing_config_file_is_a_usage_error(secured, tmp_path):
    r = ferry("produce", "--zookeeper", secured.zk, "--topic", "cli-sasl", "--command-config",
              str(tmp_path / "nope.properties"), stdin="x\n")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "nope.properties" in r.stderr and "Traceback" not in r.stderr


def test_the_password_is_not_in_the_process_list(secured):
    """A running console producer (waiting on stdin) shows its config file's name, never what is in it."""
    config = secured.sasl_ssl_config("alice", PASSWORD)
    proc = subprocess.Popen([sys.executable, "-m", "ferry.cli", "produce", "--zookeeper", secured.zk, "--topic",
                             "cli-sasl", "--command-config", str(config)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        listing = ""
        while time.monotonic() < deadline and str(config) not in listing:
            listing = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, timeout=10).stdout
            time.sleep(0.2)
        assert str(config) in listing and PASSWORD not in listing
        out, err = proc.communicate("one\ntwo\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err
    assert PASSWORD not in err + out
