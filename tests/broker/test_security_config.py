"""Listener and security settings (broker/server/security_config.py) and the certificate principal mapping
(ssl_principal.py): Kafka's spellings accepted, bad values refused with a message naming the setting."""

from __future__ import annotations

import pytest

from ferry.broker.server.security_config import SecurityConfig, SecurityConfigError
from ferry.broker.server.ssl_principal import PrincipalMapper, subject_dn


def test_listeners_map_and_advertised():
    cfg = SecurityConfig.from_properties({
        "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://0.0.0.0:9093,SASL_SSL://0.0.0.0:9094",
        "listener.security.protocol.map": "INTERNAL:SSL,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "advertised.listeners": "INTERNAL://b1.dc:9093,SASL_SSL://b1.example:19094",
        "inter.broker.listener.name": "INTERNAL", "ssl.keystore.location": "/k.pem",
        "ssl.truststore.location": "/ca.pem", "ssl.client.auth": "required",
    })
    assert [(lst.name, lst.security_protocol) for lst in cfg.listeners] == [
        ("PLAINTEXT", "PLAINTEXT"), ("INTERNAL", "SSL"), ("SASL_SSL", "SASL_SSL")]
    internal = cfg.listener("INTERNAL")
    assert (internal.host, internal.port, internal.advertised_host, internal.advertised_port) == \
        ("0.0.0.0", 9093, "b1.dc", 9093)
    assert cfg.listener("PLAINTEXT").advertised_host == "127.0.0.1"
    assert cfg.inter_broker_listener == "INTERNAL" and cfg.ssl.client_auth == "required"


def test_inter_broker_client_is_the_brokers_own_login():
    """What a plugin producing into the broker's own cluster uses (the mirror links' audit counts): the
    inter-broker listener's protocol and user, the truststore as CA, the broker's certificate when asked for."""
    cfg = SecurityConfig.from_properties({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093",
        "advertised.listeners": "SASL_SSL://b1.dc:9093", "inter.broker.listener.name": "SASL_SSL",
        "ssl.keystore.location": "/k.pem", "ssl.truststore.location": "/ca.pem", "ssl.client.auth": "required",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512", "inter.broker.sasl.username": "broker",
        "inter.broker.sasl.password": "s3cret"})
    own = cfg.inter_broker_client()
    assert dict(own.properties) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "broker",
        "sasl.password": "s3cret", "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/k.pem",
        "ssl.key.location": "/k.pem"}
    assert "s3cret" not in repr(own)
    plain = SecurityConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:9092"}).inter_broker_client()
    assert plain.is_plaintext


@pytest.mark.parametrize("props, message", [
    ({"listeners": "CUSTOM://h:1"}, "listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "given twice"),
    ({"listeners": "SSL://h:1"}, "ssl.keystore.location"),
    ({"listeners": "PLAINTEXT://0.0.0.0:1"}, "advertised.listeners"),
    ({"listeners": "PLAINTEXT://h:1", "inter.broker.listener.name": "SSL"}, "inter.broker.listener.name"),
    ({"listeners": "PLAINTEXT://h:1,SASL_PLAINTEXT://h:2", "inter.broker.listener.name": "SASL_PLAINTEXT"},
     "inter.broker.sasl.username"),
    ({"listeners": "SASL_PLAINTEXT://h:2", "inter.broker.sasl.username": "b", "inter.broker.sasl.password": "p",
      "sasl.enabled.mechanisms": "PLAIN"}, "sasl.mechanism.inter.broker.protocol"),
    ({"listeners": "PLAINTEXT://h:1", "sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
    ({"listeners": "PLAINTEXT://h:1", "ssl.client.auth": "maybe"}, "ssl.client.auth"),
    ({"listeners": "PLAINTEXT://h:1", "ssl.client.auth": "required"}, "ssl.truststore.location"),
    ({"listeners": "PLAINTEXT://h:1", "ssl.keystore.type": "JKS"}, "only PEM"),
    ({"listeners": "PLAINTEXT://h:1", "ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
    ({"listeners": "PLAINTEXT://h:1", "connections.max.reauth.ms": "soon"}, "connections.max.reauth.ms"),
    ({"listeners": "PLAINTEXT://h:99999"}, "out of range"),
])
def test_bad_settings_name_the_setting(props, message):
    with pytest.raises(SecurityConfigError, match=message):
        SecurityConfig.from_properties(props)


SUBJECT = ((("countryName", "US"),), (("organizationName", "ferry, inc"),), (("organizationalUnitName", "ops"),),
           (("commonName", "Mirror"),))


def test_subject_dn_is_rfc2253_most_specific_first():
    assert subject_dn(SUBJECT) == r"CN=Mirror,OU=ops,O=ferry\, inc,C=US"


@pytest.mark.parametrize("rules, expected", [
    ("DEFAULT", r"CN=Mirror,OU=ops,O=ferry\, inc,C=US"),
    ("RULE:^CN=(.*?),OU=ops,.*$/$1/", "Mirror"),
    ("RULE:^CN=(.*?),OU=ops,.*$/$1/L", "mirror"),
    ("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U, DEFAULT", "MIRROR@OPS"),
    ("RULE:^CN=nobody,.*$/x/,DEFAULT", r"CN=Mirror,OU=ops,O=ferry\, inc,C=US"),
    ("RULE:^CN=nobody,.*$/x/", None),
    (r"RULE:^CN=(.*?),OU=ops,.*$/svc\/$1/", "svc/Mirror"),
])
def test_mapping_rules(rules, expected):
    assert PrincipalMapper(rules).name(subject_dn(SUBJECT)) == expected


@pytest.mark.parametrize("rules", ["", "RULE:^CN=(.*$/$1/", "RULE:abc/def", "SOMETHING"])
def test_bad_mapping_rules(rules):
    with pytest.raises(ValueError, match="ssl.principal.mapping.rules"):
        PrincipalMapper(rules)


def test_bad_mapping_rules_refused_at_configuration():
    with pytest.raises(SecurityConfigError, match="ssl.principal.mapping.rules"):
        SecurityConfig.from_properties({"listeners": "PLAINTEXT://h:1", "ssl.principal.mapping.rules": "RULE:x"})


def test_secrets_stay_out_of_reprs():
    cfg = SecurityConfig.from_properties({
        "listeners": "SASL_SSL://127.0.0.1:1", "inter.broker.sasl.username": "broker",
        "inter.broker.sasl.password": "hunter2", "ssl.keystore.location": "/k.pem", "ssl.key.password": "pass2"})
    assert "hunter2" not in repr(cfg) and "pass2" not in repr(cfg) and "broker" in repr(cfg)
