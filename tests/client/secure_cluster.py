"""A secured cluster for the client-side tests: brokers with PLAINTEXT (inter-broker), SSL (client certificates
requested) and SASL_SSL listeners, certificates made by openssl (tests/broker/tls_certs.py), SCRAM users made with
`ferry users`, optionally the authorizer; and the --command-config files ferry's own clients read."""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from tls_certs import Certs, make_certs  # noqa: E402

from ferry.embedded import BrokerProcess, free_port  # noqa: E402


def add_user(zk: str, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
    r = subprocess.run([sys.executable, "-m", "ferry.cli", "users", "add", user, "--mechanism", mechanism,
                        "--password-stdin", "--zookeeper", zk], input=password + "\n", capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@dataclass
class SecureCluster:
    root: Path
    zk: str
    certs: Certs
    brokers: list[BrokerProcess] = field(default_factory=list)
    ports: list[dict[str, int]] = field(default_factory=list)

    @property
    def plaintext(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def bootstrap(self, protocol: str) -> str:
        return ",".join(f"127.0.0.1:{p[protocol]}" for p in self.ports)

    def sasl_ssl_config(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                        name: str | None = None) -> Path:
        """A --command-config file for SASL_SSL as ``user`` (0600, as an operator keeps one)."""
        return self.write_config(name or f"{user}-{uuid.uuid4().hex[:6]}.properties",
                                 {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                                  "sasl.username": user, "sasl.password": password,
                                  "ssl.ca.location": str(self.certs.ca)})

    def mtls_config(self, cn: str, ou: str = "apps") -> Path:
        cert, key = self.certs.client(cn, ou)
        return self.write_config(f"mtls-{cn}.properties", {
            "security.protocol": "SSL", "ssl.ca.location": str(self.certs.ca),
            "ssl.certificate.location": str(cert), "ssl.key.location": str(key)})

    def write_config(self, name: str, props: dict[str, str]) -> Path:
        path = self.root / name
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        path.chmod(0o600)
        return path

    def stop(self) -> None:
        for b in self.brokers:
            b.stop()


def start_secure_cluster(zk_server_connect: str, root: Path, datacenter: str = "live", n_brokers: int = 1,
                         extra_props: str = "", extra_args: tuple[str, ...] = ()) -> SecureCluster:
    """Brokers of one new chroot, every one with PLAINTEXT + SSL + SASL_SSL listeners."""
    root.mkdir(parents=True, exist_ok=True)
    certs = make_certs(root / "certs")
    zk = f"{zk_server_connect}/t/{uuid.uuid4().hex[:12]}/{datacenter}"
    props = root / "security.properties"
    props.write_text(f"ssl.keystore.type=PEM\nssl.keystore.location={certs.server}\n"
                     f"ssl.truststore.location={certs.ca}\nssl.client.auth=requested\n"
                     "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n"
                     "connection.failed.authentication.delay.ms=100\n"
                     "connection.failed.authentication.delay.max.ms=500\n" + extra_props)
    cluster = SecureCluster(root, zk, certs)
    for broker_id in range(1, n_brokers + 1):
        ports = {name: free_port("127.0.0.1") for name in ("SSL", "SASL_SSL")}
        args = ["--config", str(props), "--flush-ms", "10", *extra_args]
        for name, port in ports.items():
            args += ["--listener", f"{name}://127.0.0.1:{port}"]
        b = BrokerProcess(broker_id, root / f"broker-{broker_id}" / "data", zk, datacenter, extra_args=args)
        cluster.brokers.append(b)
        cluster.ports.append(ports)
        b.start()
    return cluster
