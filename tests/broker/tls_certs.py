"""Test certificates made with the real `openssl` command: a CA, a server certificate for 127.0.0.1 (SAN IP),
client certificates signed by the CA, and a self-signed one. PEM files in a directory; the keystores are
certificate + key in one file (ssl.keystore.type=PEM)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass
class Certs:
    dir: Path
    ca: Path  # CA certificate (truststore)
    server: Path  # server cert + key
    server_cert: Path
    server_key: Path

    def client(self, cn: str, ou: str = "apps", self_signed: bool = False, expired: bool = False
               ) -> tuple[Path, Path]:
        """(certificate, key) of a client certificate with subject CN=<cn>,OU=<ou>,O=ferry (``expired``: its
        validity ended yesterday)."""
        name = f"client-{cn}{'-self' if self_signed else ''}"
        subj = f"/O=ferry/OU={ou}/CN={cn}"
        d = self.dir
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-subj", subj,
                 *(["-x509", "-days", "2", "-out", f"{name}.pem"] if self_signed else ["-out", f"{name}.csr"]),
                 cwd=d)
        if not self_signed:
            _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                     "-days", "-1" if expired else "2", "-out", f"{name}.pem", cwd=d)
        return d / f"{name}.pem", d / f"{name}.key"


def make_certs(d: Path) -> Certs:
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/O=ferry/CN=ferry test CA", cwd=d)
    issue_server(d, "server")
    return Certs(d, d / "ca.pem", d / "server-keystore.pem", d / "server.pem", d / "server.key")


def issue_server(d: Path, name: str) -> Path:
    """(Re-)issue the server certificate for 127.0.0.1 and localhost; returns its keystore (cert + key)."""
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/O=ferry/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.ext", "-out", f"{name}.pem", cwd=d)
    keystore = d / f"{name}-keystore.pem"
    tmp = d / f"{name}-keystore.tmp"
    tmp.write_text((d / f"{name}.pem").read_text() + (d / f"{name}.key").read_text())
    tmp.replace(keystore)
    return keystore
