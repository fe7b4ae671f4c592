"""Helpers for the consumer-group tests: topics written straight into ZooKeeper, owners read back."""

from __future__ import annotations

import time
from collections.abc import Callable

from kazoo.client import KazooClient

from broker.client import group_dirs as dirs
from broker.client.group_store import read_owners
from broker.zk import TopicInfo, ZkConnect


def zk_client(zk_connect: str) -> KazooClient:
    from broker.zk import connect

    return connect(ZkConnect.parse(zk_connect), timeout=10)


def write_topic(zk: KazooClient, name: str, partitions: int, leader: int = 1) -> None:
    """Register a topic the way the cluster registry does (no broker needed for ownership tests)."""
    info = TopicInfo.from_assignment(name, {p: (leader,) for p in range(partitions)})
    zk.ensure_path("/brokers/topics")
    zk.create(f"/brokers/topics/{name}", info.encode())


def owners(zk: KazooClient, group: str, topic: str | None = None) -> dict[tuple[str, int], str]:
    o = read_owners(zk, group)
    return {k: v for k, v in o.items() if topic is None or k[0] == topic}


def members(zk: KazooClient, group: str) -> list[str]:
    return sorted(zk.get_children(dirs.ids_dir(group)))


def wait_until(cond: Callable[[], object], timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last value {last!r})")


def by_owner(o: dict[tuple[str, int], str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for (_, p), c in sorted(o.items()):
        out.setdefault(c, []).append(p)
    return out
