"""Fixtures for the client tests: a real two-broker cluster with topics created through the registry."""

from __future__ import annotations

import pytest

from ferry.zk import ClusterRegistry


@pytest.fixture
def live(cluster_factory):
    """A running two-broker cluster (datacenter "live"), with `_audit` created."""
    cluster = cluster_factory(n_brokers=2, datacenter="live")
    create_topic(cluster.zk_connect, "_audit", 1)
    return cluster


def create_topic(zk_connect: str, name: str, partitions: int) -> None:
    reg = ClusterRegistry(zk_connect).start()
    try:
        reg.create_topic(name, partitions)
    finally:
        reg.stop()
