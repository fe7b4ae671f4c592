"""ferry's own clients on secured listeners (docs/security.md "Clients and tools"): the blocking BrokerConnection
and WireClient over SASL_SSL (SCRAM) and SSL with a client certificate, configured from --command-config files
(ClientConfig); a wrong password, an unknown CA and a bad file are refused in one line, the password never
shown."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from secure_cluster import add_user, start_secure_cluster  # noqa: E402

from ferry.client.consumer_connector import ConsumerConnector  # noqa: E402
from ferry.client.kafka_groups import KafkaGroups  # noqa: E402
from ferry.client.message_set_consumer import MessageSetConsumer  # noqa: E402
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


def test_producer_and_consumer_connector_over_sasl_ssl(secured):
    """The audited Producer and the ZooKeeper-coordinated ConsumerConnector find the brokers in ZooKeeper and
    reach them on their SASL_SSL listeners; the message-set consumer and the simple consumer read the same."""
    config = ClientConfig.from_file(secured.sasl_ssl_config("alice", PASSWORD))
    with ClusterRegistry(secured.zk) as reg:
        reg.create_topic("secure-events", 2, None, 1)
        reg.create_topic("_audit", 1, None, 1)
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
