"""A ZooKeeper server from Debian's package as a local process bound to loopback (demo, tests, `ferry zookeeper`).

With ``ZkServerTls`` it also serves TLS on ``secureClientPort`` (Netty's connection factory, PEM key and trust
stores made from the deployment CA's files; ZooKeeper 3.8 reads PEM itself), and the plaintext client port may
be turned off (port 0)."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ferry.zk.local_process import EmbeddedError, ManagedProcess, free_port, tail_log, wait_for_port

# zookeeper.jar's manifest names most of its dependencies; Netty's codec and resolver (the TLS port) it does not.
ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/zookeeper-jute.jar",
                  "/usr/share/java/slf4j-simple.jar", "/usr/share/java/netty-codec.jar",
                  "/usr/share/java/netty-resolver.jar")
CLIENT_AUTH = ("none", "want", "need")


@dataclass(frozen=True)
class ZkServerTls:
    """The TLS port's stores: ``keystore`` the server certificate + key (PEM, one file), ``truststore`` the CA
    (PEM); ``client_auth``: whether clients must show a certificate signed by it (ZooKeeper's ssl.clientAuth)."""

    port: int
    keystore: Path
    truststore: Path
    client_auth: str = "none"

    def config_lines(self, host: str) -> str:
        return (f"secureClientPort={self.port}\n"
                f"secureClientPortAddress={host}\n"
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
                f"ssl.keyStore.location={Path(self.keystore).resolve()}\n"
                "ssl.keyStore.type=PEM\n"
                f"ssl.trustStore.location={Path(self.truststore).resolve()}\n"
                "ssl.trustStore.type=PEM\n"
                f"ssl.clientAuth={self.client_auth}\n")


def zookeeper_classpath() -> str:
    """Debian's zookeeper package jars; a clear error if the package is missing."""
    missing = [j for j in ZOOKEEPER_JARS[:1] if not os.path.exists(j)]
    if missing or shutil.which("java") is None:
        raise EmbeddedError("ZooKeeper needs Debian's `zookeeper` package and java "
                            "(run scripts/setup.sh or `apt-get install -y zookeeper`)")
    return ":".join(j for j in ZOOKEEPER_JARS if os.path.exists(j))


class ZooKeeperServer:
    """A standalone ZooKeeper bound to loopback (the AdminServer off, `envi` whitelisted for kazoo).

    Its child process (log file, stop/kill/pause) is a ManagedProcess it holds."""

    def __init__(self, port: int | None = None, data_dir: str | Path = "zookeeper", host: str = "127.0.0.1",
                 heap_mb: int = 256, tick_ms: int = 2000, tls: ZkServerTls | None = None) -> None:
        self.host = host
        self.tls = tls
        # port 0 with TLS: no plaintext client port at all
        self.port = port if (port or (tls is not None and port == 0)) else free_port(host)
        self.data_dir = Path(data_dir).resolve()
        self.heap_mb = heap_mb
        self.tick_ms = tick_ms
        self.process = ManagedProcess(f"zookeeper:{self.port}", self.data_dir / "zookeeper.out")

    @property
    def connect(self) -> str:
        """The plaintext client address (the TLS one when the plaintext port is off)."""
        return f"{self.host}:{self.port}" if self.port else self.secure_connect

    @property
    def secure_connect(self) -> str:
        if self.tls is None:
            raise EmbeddedError("this ZooKeeper serves no TLS port")
        return f"{self.host}:{self.tls.port}"

    def write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={self.data_dir / 'data'}\n"
            + (f"clientPort={self.port}\nclientPortAddress={self.host}\n" if self.port else "")
            + (self.tls.config_lines(self.host) if self.tls is not None else "")
            + "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,envi\n"
            "maxSessionTimeout=60000\n"
        )
        return cfg

    def argv(self) -> list[str]:
        return ["java", f"-Xmx{self.heap_mb}m", "-Dzookeeper.admin.enableServer=false",
                "-cp", zookeeper_classpath(), "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(self.write_config())]

    @property
    def log_file(self) -> Path:
        return self.process.log_file

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.process.proc

    @property
    def running(self) -> bool:
        return self.process.running

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        self.process.spawn(self.argv())
        port = self.port or self.tls.port  # type: ignore[union-attr]
        wait_for_port(self.host, port, timeout, self.process.proc, self.log_file)
        self._wait_ruok(timeout)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop: SIGTERM, then SIGKILL after ``timeout`` seconds."""
        self.process.stop(timeout)

    def kill(self) -> None:
        """SIGKILL: the crash a test wants to survive."""
        self.process.kill()

    def pause(self) -> None:
        """SIGSTOP: the server hangs (a network partition seen from outside)."""
        self.process.pause()

    def resume(self) -> None:
        self.process.resume()

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_ruok(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                # `ruok` answers imok before the server takes sessions; `srvr` says when it serves.
                if self._four_letters(b"ruok") == b"imok" and self._serving():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise EmbeddedError(f"ZooKeeper on {self.connect} never answered ruok" + tail_log(self.log_file))

    def _four_letters(self, word: bytes) -> bytes:
        """A four-letter word on the plaintext port, or over TLS (trusting the server's CA) when that is off."""
        raw = socket.create_connection((self.host, self.port or self.tls.port), timeout=1)  # type: ignore[union-attr]
        try:
            if not self.port:
                ctx = ssl.create_default_context(cafile=str(self.tls.truststore))  # type: ignore[union-attr]
                ctx.check_hostname = False
                raw = ctx.wrap_socket(raw)
            raw.sendall(word)
            reply = b""
            while chunk := raw.recv(4096):
                reply += chunk
            return reply
        finally:
            raw.close()

    def _serving(self) -> bool:
        reply = self._four_letters(b"srvr")
        return reply.startswith(b"Zookeeper version") and b"not currently serving" not in reply
