"""`ferry demo --secure`: TLS + SCRAM + ACLs end to end (docs/demo.md "Secured").

Under ``<dir>/security``: a CA and one broker certificate for 127.0.0.1/localhost (made with `cryptography`),
the brokers' properties (SASL_SSL listener with SCRAM-SHA-512, the authorizer, inter-broker traffic over
SASL_SSL as the super user ``broker``), and one client properties file (0600) per user and cluster. Every
user gets the least its role needs:

- live ``frontend``: Write on the activity topics and `_audit`, IdempotentWrite on the cluster;
- live ``mirror``: Read on every topic and on the group ferry-mirror; offline ``mirror``: Write and Create;
- offline ``loader``: Read on every topic, Write on `_audit` (the warehouse's counts), IdempotentWrite;
- ``monitor`` on both: Read on `_audit`, Describe on topics and the mirror's group (books, dashboard, report).

No one else: the loopback PLAINTEXT listener answers an anonymous client with authorization errors, the
SASL_SSL one refuses a client without credentials. Passwords are random, written only into those files.

ZooKeeper too: it serves TLS only (its secureClientPort, the brokers' certificate), and every ferry process
of the demo reaches it with the demo's TLS settings and one digest identity, so its znodes are ACL'd
(writable only with that identity, SCRAM credentials not even readable). Both files are named in the demo's
environment ($FERRY_ZOOKEEPER_TLS_CONFIG, $FERRY_ZOOKEEPER_CREDENTIALS), which its children inherit.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ferry.wire.acl_binding import AccessControlEntry, AclBinding, ResourcePattern
from ferry.wire.client_config import ClientConfig
from ferry.wire.protocol.acl_types import AclOperation, AclPermissionType, PatternType, ResourceType
from ferry.wire.scram import ScramCredential
from ferry.zk import connect
from ferry.zk.acl_store import add_acls
from ferry.zk.scram_credentials import ScramCredentialStore
from ferry.zk.zk_credentials import ENV_CREDENTIALS
from ferry.zk.zk_tls import ENV_TLS_CONFIG
from ferry.zk.zookeeper_server import ZkServerTls

MECHANISM = "SCRAM-SHA-512"
CLUSTER = "kafka-cluster"
AUDIT = "_audit"


def _allow(user: str, rtype: ResourceType, name: str, *ops: AclOperation,
           pattern: PatternType = PatternType.LITERAL) -> list[AclBinding]:
    return [AclBinding(ResourcePattern(rtype, name, pattern),
                       AccessControlEntry(f"User:{user}", "*", op, AclPermissionType.ALLOW)) for op in ops]


def role_acls(datacenter: str, topics: tuple[str, ...]) -> dict[str, list[AclBinding]]:
    """user -> the ACLs of least privilege it gets in ``datacenter`` (live or offline)."""
    T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
    op = AclOperation
    monitor = [*_allow("monitor", T, AUDIT, op.READ), *_allow("monitor", T, "*", op.DESCRIBE),
               *_allow("monitor", G, "ferry-mirror", op.DESCRIBE)]
    if datacenter == "live":
        frontend = [b for t in (*topics, AUDIT) for b in _allow("frontend", T, t, op.WRITE)]
        return {"frontend": frontend + _allow("frontend", C, CLUSTER, op.IDEMPOTENT_WRITE),
                "mirror": [*_allow("mirror", T, "*", op.READ), *_allow("mirror", G, "ferry-mirror", op.READ)],
                "monitor": monitor}
    return {"mirror": [*_allow("mirror", T, "*", op.WRITE, op.CREATE),
                       *_allow("mirror", C, CLUSTER, op.IDEMPOTENT_WRITE)],
            "loader": [*_allow("loader", T, "*", op.READ), *_allow("loader", T, AUDIT, op.WRITE),
                       *_allow("loader", C, CLUSTER, op.IDEMPOTENT_WRITE)],
            "monitor": monitor}


class DemoCertificates:
    """The demo's CA and the brokers' certificate (PEM files; keys 0600), made once per demo directory."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = folder / "ca.pem"
        self.keystore = folder / "broker-keystore.pem"  # certificate + key (ssl.keystore.type=PEM)

    def ensure(self) -> None:
        if self.ca.exists() and self.keystore.exists():
            return
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        now = dt.datetime.now(dt.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ferry demo"),
                             x509.NameAttribute(NameOID.COMMON_NAME, "ferry demo CA")])
        ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
                   .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=365))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False, encipher_only=False,
                                                decipher_only=False), critical=True)
                   .sign(ca_key, hashes.SHA256()))
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ferry demo"),
                                         x509.NameAttribute(NameOID.COMMON_NAME, "ferry broker")]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=365))
                .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                            x509.DNSName("localhost")]), critical=False)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        pem = serialization.Encoding.PEM
        key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        ca_key_pem = ca_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        _write_private(self.folder / "ca.key", ca_key_pem)
        _write_private(self.keystore, cert.public_bytes(pem) + key_pem)
        self.ca.write_bytes(ca_cert.public_bytes(pem))


class DemoSecurity:
    """Certificates, users, ACLs and the client and broker properties files of a secured demo."""

    def __init__(self, root: Path, topics: tuple[str, ...]) -> None:
        self.folder = root / "security"
        self.topics = topics
        self.certs = DemoCertificates(self.folder)

    def client_file(self, datacenter: str, user: str) -> Path:
        return self.folder / "clients" / f"{datacenter}-{user}.properties"

    def client(self, datacenter: str, user: str) -> ClientConfig:
        return ClientConfig.from_file(self.client_file(datacenter, user))

    def broker_config(self, datacenter: str) -> Path:
        return self.folder / f"{datacenter}-broker.properties"

    @property
    def zookeeper_tls_file(self) -> Path:
        return self.folder / "zookeeper-tls.properties"

    @property
    def zookeeper_credentials_file(self) -> Path:
        return self.folder / "zookeeper-credentials"

    def secure_zookeeper(self, tls_port: int) -> ZkServerTls:
        """Before ZooKeeper starts: its TLS port's stores, the clients' TLS file and the digest identity (kept
        across runs in one directory: the znodes of an earlier run carry its ACL), both named in this process's
        environment for every ferry process the demo starts."""
        self.certs.ensure()
        if not self.zookeeper_credentials_file.exists():
            _write_private(self.zookeeper_credentials_file,
                           f"username=ferry\npassword={secrets.token_urlsafe(18)}\n".encode())
        _write_private(self.zookeeper_tls_file, (
            "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n"
            "zookeeper.ssl.client.enable=true\n"
            "zookeeper.ssl.truststore.type=PEM\n"
            f"zookeeper.ssl.truststore.location={self.certs.ca}\n").encode())
        os.environ[ENV_TLS_CONFIG] = str(self.zookeeper_tls_file)
        os.environ[ENV_CREDENTIALS] = str(self.zookeeper_credentials_file)
        return ZkServerTls(tls_port, self.certs.keystore, self.certs.ca)

    def prepare(self, zookeepers: dict[str, str]) -> None:
        """Before the brokers start: certificates, a fresh password per user, its SCRAM credential in the
        cluster's ZooKeeper, the ACLs, the client files and the brokers' properties."""
        self.certs.ensure()
        (self.folder / "clients").mkdir(mode=0o700, parents=True, exist_ok=True)
        for datacenter, zk in zookeepers.items():
            acls = role_acls(datacenter, self.topics)
            passwords = {user: secrets.token_urlsafe(18) for user in ("broker", *acls)}
            client = connect(zk, create_chroot=True)
            try:
                store = ScramCredentialStore(client)
                for user, password in passwords.items():
                    store.set(user, MECHANISM, ScramCredential.create(MECHANISM, password))
                add_acls(client, [b for bindings in acls.values() for b in bindings])
            finally:
                client.stop()
                client.close()
            for user in acls:
                ClientConfig({"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM, "sasl.username": user,
                              "sasl.password": passwords[user], "ssl.ca.location": str(self.certs.ca)},
                             f"demo {datacenter} {user}").write_private(self.client_file(datacenter, user))
            _write_private(self.broker_config(datacenter), (
                "ssl.keystore.type=PEM\n"
                f"ssl.keystore.location={self.certs.keystore}\n"
                f"ssl.truststore.location={self.certs.ca}\n"
                f"sasl.enabled.mechanisms={MECHANISM}\n"
                "authorizer.class.name=ferry\n"
                "allow.everyone.if.no.acl.found=false\n"
                "super.users=User:broker\n"
                "inter.broker.listener.name=SASL_SSL\n"
                f"sasl.mechanism.inter.broker.protocol={MECHANISM}\n"
                "inter.broker.sasl.username=broker\n"
                f"inter.broker.sasl.password={passwords['broker']}\n").encode())

    def broker_args(self, datacenter: str, sasl_ssl_port: int) -> tuple[str, ...]:
        return ("--config", str(self.broker_config(datacenter)), "--listener", f"SASL_SSL://127.0.0.1:{sasl_ssl_port}")

    def airflow_connections(self) -> dict[str, str]:
        """AIRFLOW_CONN_* values (JSON, type kafka: the extra holds the client properties) for the DAG's
        loader (offline) and its live completeness check (live monitor); set in this process's environment
        only, never on a command line."""
        return {f"AIRFLOW_CONN_{name.upper()}": json.dumps({"conn_type": "kafka",
                                                            "extra": dict(self.client(dc, user).properties)})
                for name, dc, user in (("ferry_offline", "offline", "loader"), ("ferry_live", "live", "monitor"))}


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(data)
