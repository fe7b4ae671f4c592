"""A ZooKeeper server from Debian's package as a local process bound to loopback (demo, tests, `ferry zookeeper`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from ferry.zk.local_process import EmbeddedError, ManagedProcess, free_port, tail_log, wait_for_port

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/zookeeper-jute.jar",
                  "/usr/share/java/slf4j-simple.jar")


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
                 heap_mb: int = 256, tick_ms: int = 2000) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.data_dir = Path(data_dir).resolve()
        self.heap_mb = heap_mb
        self.tick_ms = tick_ms
        self.process = ManagedProcess(f"zookeeper:{self.port}", self.data_dir / "zookeeper.out")

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={self.data_dir / 'data'}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
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
        wait_for_port(self.host, self.port, timeout, self.process.proc, self.log_file)
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
                with socket.create_connection((self.host, self.port), timeout=1) as s:
                    s.sendall(b"ruok")
                    ok = s.recv(16) == b"imok"
                # `ruok` answers imok before the server takes sessions; `srvr` says when it serves.
                if ok and self._serving():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise EmbeddedError(f"ZooKeeper on {self.connect} never answered ruok" + tail_log(self.log_file))

    def _serving(self) -> bool:
        with socket.create_connection((self.host, self.port), timeout=1) as s:
            s.sendall(b"srvr")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
        return reply.startswith(b"Zookeeper version") and b"not currently serving" not in reply
