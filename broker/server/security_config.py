"""SecurityConfig: a broker's listeners (Kafka's ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map``, ``inter.broker.listener.name``) and the TLS and SASL settings they use.

Parsed and checked at start-up like the rest of BrokerConfig: a bad value stops the broker with a message
naming the setting. TLS material is PEM (Kafka's ``ssl.keystore.type=PEM``, KIP-651): the keystore file
holds the certificate chain and the private key, the truststore file the CA certificates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ferry.broker.server.ssl_principal import PrincipalMapper
from ferry.wire.client_config import ClientConfig

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_AUTH = ("none", "requested", "required")
_NAME = re.compile(r"^[A-Za-z0-9_]+$")

SECURITY_KEYS = {
    "listener.security.protocol.map", "inter.broker.listener.name", "security.inter.broker.protocol",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.client.auth", "ssl.principal.mapping.rules", "ssl.enabled.protocols",
    "sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol", "connections.max.reauth.ms",
    "connection.failed.authentication.delay.ms", "connection.failed.authentication.delay.max.ms",
    "inter.broker.sasl.username", "inter.broker.sasl.password",
}


class SecurityConfigError(ValueError):
    """A bad listener or security setting; the message names it."""


@dataclass(frozen=True)
class Listener:
    """One listener: its name (PLAINTEXT, SSL, or a custom name mapped to a protocol), where it binds, and
    the address advertised to clients that come in on it."""

    name: str
    security_protocol: str
    host: str
    port: int
    advertised_host: str = ""
    advertised_port: int = 0

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class SslSettings:
    keystore_location: str = ""  # PEM: certificate chain + private key
    key_password: str = field(default="", repr=False)
    truststore_location: str = ""  # PEM: CA certificates (client certificates are checked against them)
    client_auth: str = "none"
    principal_mapping_rules: str = "DEFAULT"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")


@dataclass(frozen=True)
class SaslSettings:
    enabled_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")
    inter_broker_mechanism: str = "SCRAM-SHA-512"
    inter_broker_username: str = ""  # the user the brokers' own connections authenticate as
    inter_broker_password: str = field(default="", repr=False)
    max_reauth_ms: int = 0  # connections.max.reauth.ms (KIP-368); 0: sessions never expire
    failed_delay_ms: int = 100  # connection.failed.authentication.delay.ms: the first failure's delay
    failed_delay_max_ms: int = 5_000  # the delay doubles per failure from one address up to this


@dataclass(frozen=True)
class SecurityConfig:
    listeners: tuple[Listener, ...]
    inter_broker_listener: str = "PLAINTEXT"
    ssl: SslSettings = field(default_factory=SslSettings)
    sasl: SaslSettings = field(default_factory=SaslSettings)

    def listener(self, name: str) -> Listener:
        for lst in self.listeners:
            if lst.name == name:
                return lst
        raise KeyError(name)

    def inter_broker_client(self) -> ClientConfig:
        """The inter-broker login as client settings (librdkafka's names), for what runs inside the broker and
        produces into its own cluster as the broker's principal (the mirror links' audit counts,
        broker_plugin.BrokerServices): the inter-broker listener's protocol, its SASL user, the truststore as
        the CA, the broker's own certificate where the listener asks clients for one."""
        inter = self.listener(self.inter_broker_listener)
        props = {"security.protocol": inter.security_protocol}
        if inter.uses_sasl:
            props |= {"sasl.mechanism": self.sasl.inter_broker_mechanism,
                      "sasl.username": self.sasl.inter_broker_username,
                      "sasl.password": self.sasl.inter_broker_password}
        if inter.uses_tls and self.ssl.truststore_location:
            props["ssl.ca.location"] = self.ssl.truststore_location
        if inter.uses_tls and self.ssl.client_auth != "none":
            props |= {"ssl.certificate.location": self.ssl.keystore_location,
                      "ssl.key.location": self.ssl.keystore_location}
            if self.ssl.key_password:
                props["ssl.key.password"] = self.ssl.key_password
        return ClientConfig(props, "the broker's inter-broker login")

    @property
    def protocol_map(self) -> dict[str, str]:
        return {lst.name: lst.security_protocol for lst in self.listeners}

    @classmethod
    def from_properties(cls, p: Mapping[str, str]) -> SecurityConfig:
        """From ``listeners`` (required), ``advertised.listeners`` and the security keys."""
        protocol_map = _protocol_map(p.get("listener.security.protocol.map", ""))
        listeners = parse_listeners(p.get("listeners", ""), "listeners", protocol_map)
        if not listeners:
            raise SecurityConfigError("listeners: at least one listener is required")
        advertised = {lst.name: lst for lst in parse_listeners(p.get("advertised.listeners", ""),
                                                               "advertised.listeners", protocol_map)}
        unknown = sorted(set(advertised) - {lst.name for lst in listeners})
        if unknown:
            raise SecurityConfigError(f"advertised.listeners: {', '.join(unknown)} not among the listeners "
                                      f"({', '.join(lst.name for lst in listeners)})")
        out = []
        for lst in listeners:
            adv = advertised.get(lst.name)
            host = adv.host if adv else lst.host
            if host in ("", "0.0.0.0", "::"):
                raise SecurityConfigError(f"advertised.listeners: required when listening on a wildcard address "
                                          f"(listener {lst.name})")
            out.append(Listener(lst.name, lst.security_protocol, lst.host, lst.port, host,
                                adv.port if adv else lst.port))
        names = [lst.name for lst in out]
        inter = p.get("inter.broker.listener.name", "")
        if not inter and p.get("security.inter.broker.protocol"):
            inter = p["security.inter.broker.protocol"].upper()
        if not inter:
            inter = "PLAINTEXT" if "PLAINTEXT" in names else names[0]
        if inter not in names:
            raise SecurityConfigError(f"inter.broker.listener.name: {inter} is not among listeners "
                                      f"({', '.join(names)})")
        cfg = cls(tuple(out), inter, _ssl_settings(p), _sasl_settings(p))
        cfg._check()
        return cfg

    def _check(self) -> None:
        try:
            PrincipalMapper(self.ssl.principal_mapping_rules)
        except ValueError as e:
            raise SecurityConfigError(str(e)) from None
        if any(lst.uses_tls for lst in self.listeners) and not self.ssl.keystore_location:
            raise SecurityConfigError("ssl.keystore.location: required by an SSL or SASL_SSL listener")
        if self.ssl.client_auth != "none" and not self.ssl.truststore_location:
            raise SecurityConfigError(f"ssl.truststore.location: required with ssl.client.auth="
                                      f"{self.ssl.client_auth}")
        inter = self.listener(self.inter_broker_listener)
        if inter.uses_sasl and not (self.sasl.inter_broker_username and self.sasl.inter_broker_password):
            raise SecurityConfigError("inter.broker.sasl.username and inter.broker.sasl.password: required when "
                                      f"the inter-broker listener {inter.name} is {inter.security_protocol}")
        if inter.uses_sasl and self.sasl.inter_broker_mechanism not in self.sasl.enabled_mechanisms:
            raise SecurityConfigError(f"sasl.mechanism.inter.broker.protocol: {self.sasl.inter_broker_mechanism} "
                                      "is not in sasl.enabled.mechanisms")


def parse_listeners(text: str, what: str, protocol_map: Mapping[str, str] | None = None) -> list[Listener]:
    """``NAME://HOST:PORT[,NAME://HOST:PORT...]``; a bare ``HOST:PORT`` is a PLAINTEXT listener. A name not
    among the four protocols must be mapped in ``listener.security.protocol.map``."""
    pm = dict(protocol_map or {})
    out: list[Listener] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        if not sep:
            name, address = "PLAINTEXT", item
        name = name.upper()
        if not _NAME.match(name):
            raise SecurityConfigError(f"{what}: bad listener name in {item!r}")
        protocol = pm.get(name) or (name if name in PROTOCOLS else "")
        if not protocol:
            raise SecurityConfigError(f"{what}: listener {name} is not a security protocol "
                                      f"({', '.join(PROTOCOLS)}) nor mapped in listener.security.protocol.map")
        host, sep, port_text = address.rpartition(":")
        if not sep or not port_text.isdigit() or "/" in host:
            raise SecurityConfigError(f"{what}: expected NAME://HOST:PORT, got {item!r}")
        if int(port_text) > 65535:
            raise SecurityConfigError(f"{what}: port {port_text} is out of range")
        if any(lst.name == name for lst in out):
            raise SecurityConfigError(f"{what}: listener {name} given twice")
        out.append(Listener(name, protocol, host.strip("[]"), int(port_text)))
    return out


def _protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in PROTOCOLS or not _NAME.match(name.strip()):
            raise SecurityConfigError(f"listener.security.protocol.map: expected NAME:PROTOCOL with PROTOCOL one "
                                      f"of {', '.join(PROTOCOLS)}, got {item!r}")
        out[name.strip().upper()] = protocol
    return out


def _ssl_settings(p: Mapping[str, str]) -> SslSettings:
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if p.get(key, "PEM").upper() != "PEM":
            raise SecurityConfigError(f"{key}: only PEM is supported, got {p[key]!r}")
    client_auth = p.get("ssl.client.auth", "none").lower()
    if client_auth not in CLIENT_AUTH:
        raise SecurityConfigError(f"ssl.client.auth: expected one of {', '.join(CLIENT_AUTH)}, got {client_auth!r}")
    protocols = tuple(x.strip() for x in p.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3").split(",") if x.strip())
    bad = [x for x in protocols if x not in ("TLSv1.2", "TLSv1.3")]
    if bad or not protocols:
        raise SecurityConfigError(f"ssl.enabled.protocols: only TLSv1.2 and TLSv1.3, got {', '.join(bad) or 'none'}")
    return SslSettings(p.get("ssl.keystore.location", ""), p.get("ssl.key.password", ""),
                       p.get("ssl.truststore.location", ""), client_auth,
                       p.get("ssl.principal.mapping.rules", "DEFAULT"), protocols)


def _sasl_settings(p: Mapping[str, str]) -> SaslSettings:
    mechanisms = tuple(x.strip().upper() for x in p.get("sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512")
                       .split(",") if x.strip())
    bad = [m for m in mechanisms if m not in MECHANISMS]
    if bad:
        raise SecurityConfigError(f"sasl.enabled.mechanisms: {', '.join(bad)} not supported "
                                  f"(supported: {', '.join(MECHANISMS)})")
    inter = p.get("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512").upper()
    if inter not in MECHANISMS:
        raise SecurityConfigError(f"sasl.mechanism.inter.broker.protocol: {inter} not supported")
    ints = {}
    for key, default in (("connections.max.reauth.ms", 0), ("connection.failed.authentication.delay.ms", 100),
                         ("connection.failed.authentication.delay.max.ms", 5_000)):
        text = p.get(key, str(default))
        try:
            ints[key] = int(text)
        except ValueError:
            raise SecurityConfigError(f"{key}: expected an integer, got {text!r}") from None
        if ints[key] < 0:
            raise SecurityConfigError(f"{key}: must be 0 or more, got {text!r}")
    return SaslSettings(mechanisms, inter, p.get("inter.broker.sasl.username", ""),
                        p.get("inter.broker.sasl.password", ""), ints["connections.max.reauth.ms"],
                        ints["connection.failed.authentication.delay.ms"],
                        max(ints["connection.failed.authentication.delay.max.ms"],
                            ints["connection.failed.authentication.delay.ms"]))
