"""Shared fixtures: one real ZooKeeper per test session, a fresh chroot per test, real broker processes."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ferry.embedded import BrokerProcess, ZooKeeperServer

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper on 127.0.0.1 (Debian's package), shared by the whole session."""
    zk = ZooKeeperServer(data_dir=tmp_path_factory.mktemp("zookeeper"))
    zk.start()
    yield zk
    zk.stop()


@pytest.fixture
def zk_connect(zk_server: ZooKeeperServer) -> str:
    """`host:port/chroot` with a chroot no other test uses (the chroot is created on first use)."""
    return f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}"


class Cluster:
    """Broker processes of one cluster (one chroot); stopped at teardown."""

    def __init__(self, root: Path, zk_connect: str, datacenter: str) -> None:
        self.root = root
        self.zk_connect = zk_connect
        self.datacenter = datacenter
        self.brokers: dict[int, BrokerProcess] = {}

    def add_broker(self, broker_id: int | None = None, extra_args: tuple[str, ...] = (), start: bool = True
                   ) -> BrokerProcess:
        broker_id = broker_id if broker_id is not None else (max(self.brokers, default=0) + 1)
        b = BrokerProcess(broker_id, self.root / f"broker-{broker_id}" / "data", self.zk_connect,
                          self.datacenter, extra_args=extra_args)
        self.brokers[broker_id] = b
        if start:
            b.start()
        return b

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop()


@pytest.fixture
def cluster_factory(tmp_path: Path, zk_server: ZooKeeperServer) -> Iterator[Callable[..., Cluster]]:
    """`cluster_factory(n_brokers=2, datacenter="live", extra_args=())` starts brokers in a fresh chroot."""
    clusters: list[Cluster] = []
    counter = itertools.count()

    def make(n_brokers: int = 1, datacenter: str = "live", extra_args: tuple[str, ...] = ()) -> Cluster:
        n = next(counter)
        zk = f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/{datacenter}"
        c = Cluster(tmp_path / f"cluster{n}-{datacenter}", zk, datacenter)
        clusters.append(c)
        for _ in range(n_brokers):
            c.add_broker(extra_args=extra_args)
        return c

    yield make
    for c in clusters:
        c.stop()


# Test files that take minutes, roughly longest first (measured: docs/testing.md). With pytest-xdist's
# `--dist loadfile` each file stays on one worker, and a long file that starts last is the whole run's tail;
# xdist's own order (most tests first, turned off by scripts/test.sh's --no-loadscope-reorder) would start
# these few-test files last. The Spark faults and the first demo lead so that the Ansible deployment, which
# waits for the container images built in the background, starts once they are (nearly) built.
LONG_FILES = (
    "tests/loaders/test_spark_faults.py",
    "tests/demo/test_demo.py",
    "tests/infra/test_ansible.py",
    "tests/integration/test_two_datacenters.py",
    "tests/demo/test_demo_secure.py",
    "tests/demo/test_demo_chaos.py",
    "tests/integration/test_replicated_datacenter.py",
    "tests/integration/test_partitions.py",
    "tests/loaders/test_spark_cluster.py",
    "tests/dags/test_dag_run.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long files first (a stable sort: every other file keeps its place, every test its place in its file)."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
