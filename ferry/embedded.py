"""Start the real pieces (ZooKeeper, brokers) as local processes: one harness for demo, tests and benchmarks.

Everything listens on 127.0.0.1. Each process writes its output to a log file in its data directory so
that a failure can be explained, and every wait is bounded in time. The process harness and ZooKeeper live
in the ZooKeeper layer (`ferry zookeeper` needs them); this module adds the broker on top.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ferry.zk.local_process import EmbeddedError, ManagedProcess, free_port, tail_log, wait_for_port
from ferry.zk.zookeeper_server import ZOOKEEPER_JARS, ZooKeeperServer, zookeeper_classpath

__all__ = ["ZOOKEEPER_JARS", "BrokerProcess", "EmbeddedError", "ManagedProcess", "ZooKeeperServer",
           "free_port", "wait_for_port", "zookeeper_classpath"]


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
                    raise EmbeddedError(f"{self.name} exited" + tail_log(self.log_file))
                time.sleep(0.05)
            raise EmbeddedError(f"{self.name} never registered at {path}" + tail_log(self.log_file))
        finally:
            zk.stop()
            zk.close()
