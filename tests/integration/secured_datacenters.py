"""The secrets of the secured datacenters (issue 38): a test CA and one server certificate per broker whose SAN is
its name on the datacenter network, SCRAM users per role, ZooKeeper digest credentials, the brokers' properties
and each role's librdkafka client files. Each role's container mounts only its own directory at /etc/ferry.

Who is who (least privilege, docs/acls.md):

| cluster | user | may |
| --- | --- | --- |
| both | `broker` | super user: the brokers among themselves over SASL_SSL |
| both | `ops` | super user: the tests' counts (the operators' account) |
| live | `frontend` | Write, Describe, Create on the activity topics and `_audit`; IdempotentWrite on the cluster |
| live | `mirror-link` | Read, Describe on every topic (the offline broker's mirror link; it writes offline as `broker`) |
| offline | `loader` | Read, Describe on every topic; Write on `_audit` (the warehouse tier's counts) |

`ferry load` (its plan, its split readers, the counts it sends to `_audit`) and `ferry audit report` run in the
loader's container with its client file over SASL_SSL as `loader`. No broker has a PLAINTEXT listener.
"""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from tls_certs import _openssl, make_certs  # noqa: E402

TOPICS = ("page_view", "click", "search")
SASL_PORT = 9093
ETC = "/etc/ferry"
ZK_CREDENTIALS = f"{ETC}/zk-credentials"


@dataclass
class Secrets:
    """Host directories, one per role (mounted read-only at /etc/ferry), and the passwords of the run."""

    root: Path
    passwords: dict[str, str] = field(default_factory=dict)  # "<dc>/<user>" -> password

    def dir(self, role: str) -> Path:
        d = self.root / role
        d.mkdir(parents=True, exist_ok=True)
        return d

    def password(self, dc: str, user: str) -> str:
        return self.passwords.setdefault(f"{dc}/{user}", secrets.token_urlsafe(18))

    def client_file(self, role: str, name: str, dc: str, user: str, password: str | None = None) -> str:
        """A 0600 librdkafka file in ``role``'s directory for SASL_SSL as ``user``; its path in the container."""
        props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                 "sasl.password": password if password is not None else self.password(dc, user),
                 "ssl.ca.location": f"{ETC}/ca.pem"}
        write_private(self.dir(role) / name, "".join(f"{k}={v}\n" for k, v in props.items()))
        return f"{ETC}/{name}"


def write_private(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o600)


def issue_host_certificate(ca_dir: Path, host: str, into: Path) -> None:
    """A server certificate for ``host`` (SAN DNS:host, its name on the datacenter network) signed by the test CA,
    as a PEM keystore (certificate + key) in ``into``/server-keystore.pem."""
    (ca_dir / f"{host}.ext").write_text(f"subjectAltName=DNS:{host}\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{host}.key", "-out", f"{host}.csr",
             "-subj", f"/O=ferry/CN={host}", cwd=ca_dir)
    _openssl("x509", "-req", "-in", f"{host}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{host}.ext", "-out", f"{host}.pem", cwd=ca_dir)
    write_private(into / "server-keystore.pem", (ca_dir / f"{host}.pem").read_text()
                  + (ca_dir / f"{host}.key").read_text())


def make_secrets(root: Path, roles: list[str]) -> Secrets:
    """Every role's directory: the CA certificate and the ZooKeeper identity for all; a keystore and
    broker.properties for the brokers; the client files of the mirror link (in the offline broker's), the
    producer, ops and the loader."""
    s = Secrets(root)
    ca = make_certs(root / "ca")
    zk_identity = f"username=ferry\npassword={secrets.token_urlsafe(18)}\n"
    for role in roles:
        d = s.dir(role)
        (d / "ca.pem").write_text(ca.ca.read_text())
        write_private(d / "zk-credentials", zk_identity)
    for role in roles:
        if "-broker-" not in role:
            continue
        dc = role.split("-")[0]
        issue_host_certificate(ca.dir, role, s.dir(role))
        write_private(s.dir(role) / "broker.properties", "\n".join([
            f"listeners=SASL_SSL://0.0.0.0:{SASL_PORT}",
            f"advertised.listeners=SASL_SSL://{role}:{SASL_PORT}",
            "inter.broker.listener.name=SASL_SSL",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={ETC}/server-keystore.pem",
            f"ssl.truststore.location={ETC}/ca.pem",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            "inter.broker.sasl.username=broker",
            f"inter.broker.sasl.password={s.password(dc, 'broker')}",
            "authorizer.class.name=ferry",
            "super.users=User:broker;User:ops",
            "connection.failed.authentication.delay.ms=100",
            "connection.failed.authentication.delay.max.ms=1000",
            ""]))
    s.client_file("live-broker-1", "frontend.properties", "live", "frontend")
    s.client_file("live-broker-1", "ops.properties", "live", "ops")
    s.client_file("offline-broker-1", "ops.properties", "offline", "ops")
    s.client_file("offline-broker-1", "mirror-link.properties", "live", "mirror-link")
    s.client_file("loader", "loader.properties", "offline", "loader")
    return s


def users(dc: str) -> list[str]:
    return ["broker", "ops", "frontend", "mirror-link"] if dc == "live" else ["broker", "ops", "loader"]


def acl_commands(dc: str) -> list[list[str]]:
    """`ferry acls add` argument lists of the least-privilege grants (the table in the module docstring). The
    mirror link's user reads live only (its copy position is in the offline log, no group). The loader's idempotent `_audit` producer needs no IdempotentWrite on the cluster: Write on a topic is enough
    (KIP-679)."""
    topics = [a for t in (*TOPICS, "_audit") for a in ("--topic", t)]
    if dc == "live":
        return [["--allow-principal", "User:frontend", "--producer", "--idempotent", *topics],
                ["--allow-principal", "User:mirror-link", "--operation", "Read", "--operation", "Describe",
                 "--topic", "*"]]
    return [["--allow-principal", "User:loader", "--operation", "Read", "--operation", "Describe", "--topic", "*"],
            ["--allow-principal", "User:loader", "--operation", "Write", "--topic", "_audit"]]
