"""ZooKeeper client TLS settings, spelled as Kafka spells them (KIP-515), and the handshake probe that turns a
refused connection into one line.

The settings come from a properties file (Kafka's tools: ``--zk-tls-config-file``; a broker: its own properties)
with these keys; others in the file are ignored, so a broker's whole properties file works as one:

- ``zookeeper.ssl.client.enable=true`` turns TLS on (nothing else does);
- ``zookeeper.ssl.truststore.location``: the CA certificate(s) the server's certificate must chain to (PEM);
- ``zookeeper.ssl.keystore.location`` (+ ``.password``): this client's certificate and key in one PEM file, for
  a server that asks for client certificates (``ssl.clientAuth=need``);
- ``zookeeper.ssl.endpoint.identification.algorithm``: ``HTTPS`` (Kafka's default) checks the server's name or
  address against its certificate, empty does not;
- ``zookeeper.clientCnxnSocket`` is accepted (the JVM needs it, kazoo does not).

kazoo reads PEM only, so a JKS or PKCS12 store is refused with a message saying so.
"""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass

from ferry.wire.properties_file import parse_properties
from ferry.zk.errors import RegistryError, ZooKeeperUnavailableError

ENV_TLS_CONFIG = "FERRY_ZOOKEEPER_TLS_CONFIG"
PREFIX = "zookeeper.ssl."
ZK_TLS_KEYS = frozenset({
    "zookeeper.clientCnxnSocket", "zookeeper.ssl.client.enable", "zookeeper.ssl.protocol",
    "zookeeper.ssl.enabled.protocols", "zookeeper.ssl.cipher.suites", "zookeeper.ssl.keystore.location",
    "zookeeper.ssl.keystore.password", "zookeeper.ssl.keystore.type", "zookeeper.ssl.truststore.location",
    "zookeeper.ssl.truststore.password", "zookeeper.ssl.truststore.type",
    "zookeeper.ssl.endpoint.identification.algorithm", "zookeeper.ssl.crl.enable", "zookeeper.ssl.ocsp.enable",
})


class ZkTlsConfigError(RegistryError, ValueError):
    """The TLS settings cannot work (a bad value, a missing file, a store kazoo cannot read)."""


class ZooKeeperTlsError(ZooKeeperUnavailableError):
    """The TLS handshake with ZooKeeper failed, or a plaintext client met a TLS port: no session is possible."""


@dataclass(frozen=True)
class ZkTlsConfig:
    """What KazooClient needs for TLS; ``keystore`` holds certificate and key (ssl.keystore.type=PEM)."""

    truststore: str | None = None
    keystore: str | None = None
    keystore_password: str | None = None
    check_hostname: bool = True
    ciphers: str | None = None
    source: str = "settings"  # where the settings came from, for messages

    def __repr__(self) -> str:  # never print the key's password
        return f"ZkTlsConfig(truststore={self.truststore!r}, keystore={self.keystore!r}, source={self.source!r})"

    @classmethod
    def from_properties(cls, props: dict[str, str], source: str = "settings") -> ZkTlsConfig | None:
        """The TLS settings in ``props`` (Kafka's names), or None when ``zookeeper.ssl.client.enable`` is not true."""
        p = {k.strip(): v.strip() for k, v in props.items() if k.strip() in ZK_TLS_KEYS}
        enable = p.get("zookeeper.ssl.client.enable", "false").lower()
        if enable not in ("true", "false"):
            raise ZkTlsConfigError(f"{source}: zookeeper.ssl.client.enable must be true or false, not {enable!r}")
        if enable == "false":
            return None
        for store in ("keystore", "truststore"):
            kind = p.get(f"{PREFIX}{store}.type", "PEM").upper()
            if kind != "PEM":
                raise ZkTlsConfigError(f"{source}: {PREFIX}{store}.type={kind}: ferry's ZooKeeper client reads PEM "
                                       "files only (a CA certificate; a certificate + key in one file)")
        algorithm = p.get(f"{PREFIX}endpoint.identification.algorithm", "HTTPS").upper()
        if algorithm not in ("HTTPS", ""):
            raise ZkTlsConfigError(f"{source}: {PREFIX}endpoint.identification.algorithm must be HTTPS or empty")
        config = cls(truststore=p.get(f"{PREFIX}truststore.location") or None,
                     keystore=p.get(f"{PREFIX}keystore.location") or None,
                     keystore_password=p.get(f"{PREFIX}keystore.password") or None,
                     check_hostname=algorithm == "HTTPS",
                     ciphers=p.get(f"{PREFIX}cipher.suites") or None, source=source)
        config.check_files()
        return config

    @classmethod
    def from_file(cls, path: str) -> ZkTlsConfig | None:
        """A `--zk-tls-config-file` (or a broker's properties file); raises ZkTlsConfigError, one line."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ZkTlsConfigError(f"cannot read the ZooKeeper TLS config file {path}: {e.strerror or e}") from None
        try:
            props = parse_properties(text, path)
        except ValueError as e:
            raise ZkTlsConfigError(str(e)) from None
        return cls.from_properties(props, source=path)

    @classmethod
    def from_environment(cls) -> ZkTlsConfig | None:
        """The settings in the file named by $FERRY_ZOOKEEPER_TLS_CONFIG (None when it is unset or empty)."""
        path = os.environ.get(ENV_TLS_CONFIG, "").strip()
        return cls.from_file(path) if path else None

    def check_files(self) -> None:
        for key, path in (("truststore", self.truststore), ("keystore", self.keystore)):
            if path and not os.access(path, os.R_OK):
                raise ZkTlsConfigError(f"{self.source}: {PREFIX}{key}.location {path} is missing or unreadable")

    def kazoo_arguments(self) -> dict:
        """KazooClient(**...) for these settings (verification always on: a TLS link that trusts anyone is not)."""
        return {"use_ssl": True, "verify_certs": True, "ca": self.truststore, "certfile": self.keystore,
                "keyfile": self.keystore, "keyfile_password": self.keystore_password,
                "check_hostname": self.check_hostname}

    def context(self) -> ssl.SSLContext:
        """The client context kazoo builds from the same settings (for the probe below)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        ctx.check_hostname = self.check_hostname
        if self.truststore:
            ctx.load_verify_locations(self.truststore)
        if self.keystore:
            ctx.load_cert_chain(self.keystore, self.keystore, self.keystore_password)
        if self.ciphers:
            ctx.set_ciphers(self.ciphers)
        return ctx


def diagnose(hosts: list[tuple[str, int]], tls: ZkTlsConfig | None, timeout: float = 2.0) -> str | None:
    """Why a session does not start, when the reason is TLS: the handshake's own error for a TLS client, or a
    server that speaks TLS to a plaintext client. None when TLS is not the problem (the server is down or slow)."""
    for host, port in hosts:
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
        except OSError:
            continue
        try:
            if tls is not None:
                with tls.context().wrap_socket(raw, server_hostname=host):
                    return None
            probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            probe.check_hostname, probe.verify_mode = False, ssl.CERT_NONE
            with probe.wrap_socket(raw, server_hostname=host):
                return (f"ZooKeeper at {host}:{port} speaks TLS and this client does not (give the client "
                        f"--zk-tls-config-file with zookeeper.ssl.client.enable=true, or ${ENV_TLS_CONFIG})")
        except ssl.SSLCertVerificationError as e:
            return (f"TLS handshake with ZooKeeper at {host}:{port} failed: {e.verify_message or e.reason} "
                    f"(is {PREFIX}truststore.location the CA that signed the server's certificate?)")
        except (ssl.SSLError, ConnectionError) as e:
            if tls is None:
                continue  # a plaintext server refuses the probe's handshake: TLS is not the problem
            return (f"TLS handshake with ZooKeeper at {host}:{port} failed: {' '.join(str(e).split())} "
                    "(is that port ZooKeeper's secureClientPort?)")
        except OSError:
            continue
        finally:
            raw.close()
    return None
