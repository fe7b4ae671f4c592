"""TLS and authentication of `ferry sql serve` (Spark's HiveThriftServer2, binary transport).

TLS: HiveServer2 wants a Java keystore, ferry's surfaces take PEM files; the PEM certificate and key become a
PKCS#12 keystore in the server's private temporary directory, under a random password that goes only into the
mode-600 Spark properties file (never argv, never a log). Authentication: HiveServer2's CUSTOM provider
(loaders/java/FerryPasswdAuthenticator.java, compiled at start against the pyspark distribution's jars) asks
a CredentialVerifier on a Unix socket in that same directory, which checks the password against the cluster's
SCRAM users with ferry's SCRAM code (one user store for Kafka clients, browsers and JDBC clients).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from ferry.wire.http_security import Authenticator, FailureDelay

PROVIDER_SOURCE = Path(__file__).resolve().parent / "java" / "FerryPasswdAuthenticator.java"
PROVIDER_CLASS = "ferry.sql.FerryPasswdAuthenticator"
PROVIDER_SETTING = "hive.server2.custom.authentication.class"
SOCKET_ENV = "FERRY_SQL_AUTH_SOCKET"
_MAX_FIELD = 4096


class ThriftSecurityError(ValueError):
    """A setting that cannot work (a key without its certificate, an unreadable or unparsable PEM file,
    a non-loopback address without TLS and authentication)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ThriftSecurity:
    """What `ferry sql serve` was asked for: TLS from PEM files, SCRAM authentication, and whether an exposed
    address without both was explicitly accepted (--insecure)."""

    certfile: str | None = None
    keyfile: str | None = None
    auth: str = "none"  # none | scram
    zookeeper: str | None = None
    insecure: bool = False

    def check(self, host: str) -> None:
        """Refuse, before anything starts, what cannot work or would expose the warehouse."""
        if self.keyfile and not self.certfile:
            raise ThriftSecurityError("--ssl-keyfile was given without --ssl-certfile")
        if self.auth == "scram" and not self.zookeeper:
            raise ThriftSecurityError("--auth scram needs the cluster's --zookeeper (the users live there)")
        for flag, path in (("--ssl-certfile", self.certfile), ("--ssl-keyfile", self.keyfile)):
            if path and not os.access(path, os.R_OK):
                raise ThriftSecurityError(f"{flag}: cannot read {path}")
        if not is_loopback(host) and not (self.tls and self.auth == "scram") and not self.insecure:
            raise ThriftSecurityError(f"--listen {host} is not loopback: give --ssl-certfile and --auth scram "
                                      "(or --insecure to serve it unprotected anyway)")

    @property
    def tls(self) -> bool:
        return bool(self.certfile)

    def hive_settings(self, keystore: Path | None, password: str | None) -> dict[str, str]:
        """HiveServer2's settings as Spark properties (spark.hadoop.*: they reach the server's HiveConf)."""
        conf: dict[str, str] = {}
        if keystore is not None and password is not None:
            conf.update({"spark.hadoop.hive.server2.use.SSL": "true",
                         "spark.hadoop.hive.server2.keystore.path": str(keystore),
                         "spark.hadoop.hive.server2.keystore.password": password})
        if self.auth == "scram":
            conf.update({"spark.hadoop.hive.server2.authentication": "CUSTOM",
                         f"spark.hadoop.{PROVIDER_SETTING}": PROVIDER_CLASS})
        return conf


def write_keystore(certfile: str, keyfile: str | None, path: Path) -> str:
    """The PEM certificate chain and key as a PKCS#12 keystore at ``path`` (mode 600); returns its password."""
    try:
        pem = Path(certfile).read_bytes()
        chain = x509.load_pem_x509_certificates(pem)
        key_pem = Path(keyfile).read_bytes() if keyfile else pem
        key = serialization.load_pem_private_key(key_pem, password=None)  # the first key block of the file
    except (ValueError, TypeError) as e:
        raise ThriftSecurityError(f"cannot load the TLS certificate {certfile} and its key: {e}") from None
    if chain[0].public_key() != key.public_key():
        raise ThriftSecurityError(f"the TLS key {keyfile or certfile} is not the key of the certificate {certfile}")
    password = secrets.token_urlsafe(24)
    blob = pkcs12.serialize_key_and_certificates(b"ferry-sql", key, chain[0], chain[1:] or None,
                                                 serialization.BestAvailableEncryption(password.encode()))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(blob)
    return password


def compile_provider(dest: Path, jars: Path) -> Path:
    """Compile the CUSTOM authentication provider into ``dest``; returns the class-path entry."""
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("--auth scram needs javac (a JDK: scripts/setup.sh installs default-jdk-headless)")
    thrift_jars = sorted(jars.glob("spark-hive-thriftserver_*.jar"))
    if not thrift_jars:
        raise RuntimeError(f"no spark-hive-thriftserver jar in {jars}")
    out = dest / "classes"
    out.mkdir(mode=0o700)
    run = subprocess.run([javac, "-nowarn", "-d", str(out), "-cp", str(thrift_jars[0]), str(PROVIDER_SOURCE)],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise RuntimeError(f"javac failed on {PROVIDER_SOURCE.name}: {(run.stderr or run.stdout).strip()[:300]}")
    return out


class CredentialVerifier:
    """Answers the Java provider's questions (is this the password of this SCRAM user?) on a Unix socket that
    only this user can reach; failures are logged with the user name and slowed per user as the brokers
    slow SASL failures, so a password cannot be guessed quickly through JDBC either."""

    def __init__(self, path: Path, authenticator: Authenticator, delay: FailureDelay | None = None) -> None:
        self.path = path
        self._authenticator = authenticator
        self._delay = delay or FailureDelay()
        self._logged: dict[str, float] = {}
        self._lock = threading.Lock()
        verifier = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                verifier._answer(self.request)

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True

        old = os.umask(0o177)
        try:
            self._server = Server(str(path), Handler)
        finally:
            os.umask(old)
        self._thread = threading.Thread(target=self._server.serve_forever, name="sql-auth", daemon=True)

    def start(self) -> CredentialVerifier:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        close = getattr(self._authenticator, "close", None)
        if close is not None:
            close()

    def _first_in_a_while(self, user: str, quiet_s: float = 60.0) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._logged.get(user, -quiet_s) < quiet_s:
                return False
            if len(self._logged) > 10_000:
                self._logged.clear()
            self._logged[user] = now
            return True

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(10.0)
        try:
            user = _read_field(conn)
            password = _read_field(conn)
        except (OSError, ValueError):
            return
        try:
            ok = self._authenticator.authenticate(user, password)
        except Exception as e:  # noqa: BLE001 - ZooKeeper down or a bad credential: refuse, say why, keep serving
            _say(f"cannot check the login of {user!r}: {type(e).__name__}: {e}")
            ok = False
        if ok:
            self._delay.succeeded(user)
            if self._first_in_a_while(user):  # the HTTP transport asks on each request: one line a minute
                _say(f"authenticated User:{user}")
        else:
            wait = self._delay.failed(user)
            _say(f"login refused for {user!r} (unknown user or wrong password)")
            threading.Event().wait(wait)
        try:
            conn.sendall(b"\x01" if ok else b"\x00")
        except OSError:
            pass


def _read_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ValueError("short request")
        data += chunk
    return data


def _read_field(conn: socket.socket) -> str:
    (size,) = struct.unpack(">I", _read_exact(conn, 4))
    if size > _MAX_FIELD:
        raise ValueError("field too long")
    return _read_exact(conn, size).decode("utf-8", errors="replace")


def _say(line: str) -> None:
    print(f"ferry sql serve: {line}", file=sys.stderr, flush=True)
