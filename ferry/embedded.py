"""Start the real pieces (ZooKeeper, brokers) as local processes: one harness for demo, tests and benchmarks.

Everything listens on 127.0.0.1. Each process writes its output to a log file in its data directory so
that a failure can be explained, and every wait is bounded in time.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger("ferry.embedded")

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/zookeeper-jute.jar",
                  "/usr/share/java/slf4j-simple.jar")


class EmbeddedError(RuntimeError):
    """A local process did not start or stop as expected."""


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on loopback (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None,
                  log_file: Path | None = None) -> None:
    """Poll until something accepts on host:port; fail early if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise EmbeddedError(f"process exited with {proc.returncode} before listening on {host}:{port}"
                                + _tail(log_file))
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise EmbeddedError(f"nothing listening on {host}:{port} after {timeout:.0f}s" + _tail(log_file))


def _tail(path: Path | None, lines: int = 30) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return "\n--- last lines of " + str(path) + " ---\n" + "\n".join(text)


def zookeeper_classpath() -> str:
    """Debian's zookeeper package jars; a clear error if the package is missing."""
    missing = [j for j in ZOOKEEPER_JARS[:1] if not os.path.exists(j)]
    if missing or shutil.which("java") is None:
        raise EmbeddedError("ZooKeeper needs Debian's `zookeeper` package and java "
                            "(run scripts/setup.sh or `apt-get install -y zookeeper`)")
    return ":".join(j for j in ZOOKEEPER_JARS if os.path.exists(j))


class ManagedProcess:
    """A child process with a log file, stopped with SIGTERM (then SIGKILL) or killed outright."""

    def __init__(self, name: str, log_file: Path) -> None:
        self.name = name
        self.log_file = log_file
        self.proc: subprocess.Popen | None = None

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_file, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        try:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        finally:
            out.close()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop: SIGTERM, then SIGKILL after `timeout` seconds."""
        if not self.running:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %.0fs; killing", self.name, timeout)
            self.kill()

    def kill(self) -> None:
        """SIGKILL: the crash a test wants to survive."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the process hangs (a network partition seen from outside)."""
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGCONT)

    def __enter__(self):
        self.start()  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class ZooKeeperServer(ManagedProcess):
    """A standalone ZooKeeper bound to loopback (the AdminServer off, `envi` whitelisted for kazoo)."""

    def __init__(self, port: int | None = None, data_dir: str | Path = "zookeeper", host: str = "127.0.0.1",
                 heap_mb: int = 256, tick_ms: int = 2000) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.data_dir = Path(data_dir).resolve()
        self.heap_mb = heap_mb
        self.tick_ms = tick_ms
        super().__init__(f"zookeeper:{self.port}", self.data_dir / "zookeeper.out")

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

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        self._spawn(self.argv())
        wait_for_port(self.host, self.port, timeout, self.proc, self.log_file)
        self._wait_ruok(timeout)
        return self

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
        raise EmbeddedError(f"ZooKeeper on {self.connect} never answered ruok" + _tail(self.log_file))

    def _serving(self) -> bool:
        with socket.create_connection((self.host, self.port), timeout=1) as s:
            s.sendall(b"srvr")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
        return reply.startswith(b"Zookeeper version") and b"not currently serving" not in reply


class BrokerProcess(ManagedProcess):
    """A ferry broker run as `python -m ferry.cli broker ...` (the same entry point as in production)."""

    def __init__(self, broker_id: int, data_dir: str | Path, zk_connect: str, datacenter: str = "local",
                 port: int | None = None, host: str = "127.0.0.1", extra_args: tuple[str, ...] | list[str] = (),
                 python: str = sys.executable) -> None:
        self.broker_id = broker_id
        self.host = host
        self.port = port or free_port(host)
        self.data_dir = Path(data_dir).resolve()
        self.zk_connect = zk_connect
        self.datacenter = datacenter
        self.extra_args = list(extra_args)
        self.python = python
        super().__init__(f"broker-{broker_id}", self.data_dir.parent / f"broker-{broker_id}.out")

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def argv(self) -> list[str]:
        return [self.python, "-m", "ferry.cli", "broker", "--id", str(self.broker_id),
                "--listen", self.bootstrap, "--data-dir", str(self.data_dir),
                "--zookeeper", self.zk_connect, "--datacenter", self.datacenter, *self.extra_args]

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._spawn(self.argv(), env=env)
        wait_for_port(self.host, self.port, timeout, self.proc, self.log_file)
        self.wait_registered(timeout)
        return self

    def wait_registered(self, timeout: float = 30.0) -> None:
        """Wait until /brokers/ids/<id> exists in the cluster's chroot (the broker is usable by clients)."""
        from kazoo.client import KazooClient

        hosts, _, chroot = self.zk_connect.partition("/")
        zk = KazooClient(hosts=hosts, timeout=10)
        zk.start(timeout=10)
        try:
            path = f"/{chroot}/brokers/ids/{self.broker_id}" if chroot else f"/brokers/ids/{self.broker_id}"
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if zk.exists(path):
                    return
                if not self.running:
                    raise EmbeddedError(f"{self.name} exited" + _tail(self.log_file))
                time.sleep(0.05)
            raise EmbeddedError(f"{self.name} never registered at {path}" + _tail(self.log_file))
        finally:
            zk.stop()
            zk.close()
