"""Start the real pieces (ZooKeeper, brokers) as local processes: one harness for demo, tests and benchmarks.

Everything listens on 127.0.0.1. Each process writes its output to a log file in its data directory so
that a failure can be explained, and every wait is bounded in time. The process harness and ZooKeeper live
in the ZooKeeper layer (`ferry zookeeper` needs them); this module adds the broker, and any `ferry` command
run as a child process, on top.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ferry.zk.kazoo_client import connect as zk_connect
from ferry.zk.local_process import EmbeddedError, ManagedProcess, free_port, tail_log, wait_for_port
from ferry.zk.zk_tls import ZkTlsConfig
from ferry.zk.zookeeper_server import ZOOKEEPER_JARS, ZooKeeperServer, zookeeper_classpath

__all__ = ["ZOOKEEPER_JARS", "BrokerProcess", "EmbeddedError", "ManagedProcess", "ZooKeeperServer",
           "free_port", "spawn_ferry", "wait_for_port", "zookeeper_classpath"]


def spawn_ferry(name: str, log_file: Path, args: list[str], python: str = sys.executable) -> ManagedProcess:
    """`python -m ferry.cli ARGS...` as a child process writing to ``log_file`` (unbuffered, so its log is
    current when a failure quotes it); the caller waits for it to be ready and stops it."""
    process = ManagedProcess(name, log_file)
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    process.spawn([python, "-m", "ferry.cli", *args], env=env)
    return process


class BrokerProcess:
    """A ferry broker run as `python -m ferry.cli broker ...` (the same entry point as in production)."""

    def __init__(self, broker_id: int, data_dir: str | Path, zk_connect: str, datacenter: str = "local",
                 port: int | None = None, host: str = "127.0.0.1", extra_args: tuple[str, ...] | list[str] = (),
                 python: str = sys.executable, zk_tls: ZkTlsConfig | None = None) -> None:
        """``zk_tls``: how the harness reaches ZooKeeper to see the broker register (the broker's own settings
        come from its flags or --config)."""
        self.broker_id = broker_id
        self.zk_tls = zk_tls
        self.name = f"broker-{broker_id}"
        self.host = host
        self.port = port or free_port(host)
        self.data_dir = Path(data_dir).resolve()
        self.zk_connect = zk_connect
        self.datacenter = datacenter
        self.extra_args = list(extra_args)
        self.python = python
        self.log_file = self.data_dir.parent / f"broker-{broker_id}.out"
        self.process: ManagedProcess | None = None  # the running child, once started

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def args(self) -> list[str]:
        return ["broker", "--id", str(self.broker_id), "--listen", self.bootstrap, "--data-dir", str(self.data_dir),
                "--zookeeper", self.zk_connect, "--datacenter", self.datacenter, *self.extra_args]

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        self.process = spawn_ferry(self.name, self.log_file, self.args(), self.python)
        wait_for_port(self.host, self.port, timeout, self.process.proc, self.log_file)
        self.wait_registered(timeout)
        return self

    # -- the child process (ManagedProcess's controls)
    @property
    def proc(self) -> subprocess.Popen | None:
        return self.process.proc if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop: SIGTERM, then SIGKILL after `timeout` seconds."""
        if self.process is not None:
            self.process.stop(timeout)

    def kill(self) -> None:
        """SIGKILL: the crash a test wants to survive."""
        if self.process is not None:
            self.process.kill()

    def pause(self) -> None:
        """SIGSTOP: the broker hangs (a network partition seen from outside)."""
        if self.process is not None:
            self.process.pause()

    def resume(self) -> None:
        if self.process is not None:
            self.process.resume()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_registered(self, timeout: float = 30.0) -> None:
        """Wait until /brokers/ids/<id> exists in the cluster's chroot (the broker is usable by clients)."""
        hosts, _, chroot = self.zk_connect.partition("/")
        zk = zk_connect(hosts, timeout=10, tls=self.zk_tls)
        try:
            path = f"/{chroot}/brokers/ids/{self.broker_id}" if chroot else f"/brokers/ids/{self.broker_id}"
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if zk.exists(path):
                    return
                if not self.running:
                    raise EmbeddedError(f"{self.name} exited" + tail_log(self.log_file))
                time.sleep(0.05)
            raise EmbeddedError(f"{self.name} never registered at {path}" + tail_log(self.log_file))
        finally:
            zk.stop()
            zk.close()
