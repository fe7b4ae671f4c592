"""The credential verifier behind `ferry sql serve --auth scram` without Spark: a real ZooKeeper holding a SCRAM
user (`ferry users add`), the verifier on its Unix socket, asked in the Java provider's framing. A correct
password is accepted, wrong ones are refused ever more slowly (brute force slowed), malformed requests get no
yes, and the socket is private."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry.loaders.sql_thrift_security import (
    CredentialVerifier,
    ThriftSecurity,
    ThriftSecurityError,
    write_keystore,
)
from ferry.wire.http_security import FailureDelay
from ferry.zk.scram_credentials import ScramAuthenticator


def _ask(path: Path, user: str, password: str) -> bytes:
    u, p = user.encode(), password.encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(path))
        s.sendall(struct.pack(">I", len(u)) + u + struct.pack(">I", len(p)) + p)
        return s.recv(1)


@pytest.fixture
def verifier(zk_connect: str, tmp_path: Path):
    run = subprocess.run([sys.executable, "-m", "ferry.cli", "users", "add", "analyst", "--password-stdin",
                          "--mechanism", "SCRAM-SHA-256", "--zookeeper", zk_connect], input="right-one\n",
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    v = CredentialVerifier(tmp_path / "auth.sock", ScramAuthenticator(zk_connect),
                           FailureDelay(base_s=0.2, cap_s=0.8)).start()
    yield v
    v.stop()


def test_right_password_yes_wrong_ones_no_and_slower(verifier: CredentialVerifier, capfd):
    assert _ask(verifier.path, "analyst", "right-one") == b"\x01"
    took = []
    for _ in range(3):
        started = time.monotonic()
        assert _ask(verifier.path, "analyst", "guess") == b"\x00"
        took.append(time.monotonic() - started)
    assert took[0] >= 0.2 and took[2] >= 0.8 > took[0]  # 0.2 s, 0.4 s, 0.8 s: doubling per failure
    assert _ask(verifier.path, "nobody", "right-one") == b"\x00"
    err = capfd.readouterr().err
    assert "authenticated User:analyst" in err and "login refused for 'nobody'" in err
    assert "right-one" not in err and "guess" not in err
    assert verifier.path.stat().st_mode & 0o077 == 0


def test_malformed_requests_get_no_yes(verifier: CredentialVerifier):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(verifier.path))
        s.sendall(struct.pack(">I", 1 << 30))  # an absurd length: the verifier hangs up
        assert s.recv(1) == b""
    assert _ask(verifier.path, "analyst", "") == b"\x00"
    assert _ask(verifier.path, "analyst", "right-one") == b"\x01"  # and keeps serving


def test_settings_refused_before_start(tmp_path: Path):
    with pytest.raises(ThriftSecurityError, match="not loopback"):
        ThriftSecurity().check("0.0.0.0")
    with pytest.raises(ThriftSecurityError, match="not loopback"):
        ThriftSecurity(certfile=__file__).check("10.0.0.1")  # TLS without authentication
    ThriftSecurity(insecure=True).check("0.0.0.0")
    ThriftSecurity(certfile=__file__, auth="scram", zookeeper="zk:2181").check("0.0.0.0")
    ThriftSecurity().check("::1")
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(ThriftSecurityError, match="cannot load the TLS certificate"):
        write_keystore(str(bad), None, tmp_path / "k.p12")
    assert not (tmp_path / "k.p12").exists()
    d = tmp_path / "pem"
    d.mkdir()
    for name in ("a", "b"):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                        f"{name}.pem", "-days", "1", "-subj", f"/CN={name}"], cwd=d, check=True, capture_output=True,
                       timeout=60)
    with pytest.raises(ThriftSecurityError, match="is not the key of the certificate"):
        write_keystore(str(d / "a.pem"), str(d / "b.key"), tmp_path / "k.p12")
    (d / "both.pem").write_text((d / "a.pem").read_text() + (d / "a.key").read_text())
    password = write_keystore(str(d / "both.pem"), None, tmp_path / "k.p12")  # the key may be in the cert file
    assert (tmp_path / "k.p12").stat().st_mode & 0o777 == 0o600
    listing = subprocess.run(["keytool", "-list", "-keystore", str(tmp_path / "k.p12"), "-storepass:env", "KS_PW"],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "KS_PW": password})
    assert listing.returncode == 0 and "PrivateKeyEntry" in listing.stdout, listing.stdout + listing.stderr
