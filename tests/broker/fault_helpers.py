"""Helpers of the replication fault tests (kill -9, SIGSTOP, zombie controllers, KIP-101 anomalies).

Kept apart from replication_helpers.py so that the fault tests can grow without touching the helpers the
basic replication tests share; everything here works on a ReplicatedCluster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from broker_wire import WireClient, fetch, list_offsets
from replication_helpers import ReplicatedCluster, batches_on_disk

from ferry.embedded import BrokerProcess
from ferry.wire.record.record_batch import read_header
from ferry.zk.znodes import CONTROLLER_EPOCH_PATH, CONTROLLER_PATH

T = TypeVar("T")
LATEST = -1  # ListOffsets timestamp: the high watermark


def empty_cluster(zk_base: str, root: Path, common: tuple[str, ...] = ()) -> ReplicatedCluster:
    """A ReplicatedCluster with no broker started yet: the test adds them one by one (order, own flags)."""
    return ReplicatedCluster(zk_base, root, 0, common)


def add_broker(cluster: ReplicatedCluster, broker_id: int, extra: tuple[str, ...] = ()) -> BrokerProcess:
    """Start broker ``broker_id`` with the cluster's flags plus ``extra`` (a later flag wins)."""
    b = BrokerProcess(broker_id, cluster.root / f"broker-{broker_id}" / "data", cluster.zk, "live",
                      extra_args=(*cluster.extra_args, *extra))
    cluster.brokers[broker_id] = b
    b.start(timeout=60)
    return b


def wait_until(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``pred`` until it returns something truthy (returned); AssertionError naming ``what`` after
    ``timeout`` seconds. Exceptions from ``pred`` count as "not yet" (a broker restarting, a file being
    rewritten) and the last one is reported."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = pred()
            if value:
                return value
            last = value
        except Exception as e:  # noqa: BLE001 - "not yet", reported below if it never clears
            last = e
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached in {timeout}s (last: {last!r})")


def broker_output(cluster: ReplicatedCluster, broker_id: int) -> str:
    """Everything broker ``broker_id`` logged (all its runs: the harness appends to one file)."""
    return cluster.brokers[broker_id].log_file.read_text(errors="replace")


def controller(cluster: ReplicatedCluster) -> tuple[int, int]:
    """(broker id in /controller or -1, /controller_epoch or -1), as ZooKeeper holds them."""
    client = cluster.registry.client
    cid = -1
    if client.exists(CONTROLLER_PATH):
        data, _ = client.get(CONTROLLER_PATH)
        cid = int(json.loads(data)["brokerid"])
    epoch = -1
    if client.exists(CONTROLLER_EPOCH_PATH):
        data, _ = client.get(CONTROLLER_EPOCH_PATH)
        epoch = int(data)
    return cid, epoch


def high_watermark(cluster: ReplicatedCluster, broker_id: int, topic: str, partition: int) -> int:
    """The HW broker ``broker_id`` answers (ListOffsets latest); AssertionError when it does not lead."""
    with WireClient(cluster.brokers[broker_id].bootstrap) as c:
        err, _ts, offset = list_offsets(c, topic, partition, LATEST)
    assert err == 0, f"ListOffsets on broker {broker_id} for {topic}-{partition}: error {err}"
    return offset


def read_values(cluster: ReplicatedCluster, broker_id: int, topic: str, partition: int,
                ) -> list[tuple[int, bytes]]:
    """(offset, value) of every record below the HW, read from broker ``broker_id`` as a consumer does."""
    from broker_wire import decode_values

    out: list[tuple[int, bytes]] = []
    offset = 0
    with WireClient(cluster.brokers[broker_id].bootstrap) as c:
        while True:
            res = fetch(c, topic, partition, offset)
            assert res.error == 0, f"Fetch from broker {broker_id} at {offset}: error {res.error}"
            got = [(o, v) for o, v in decode_values(res.records) if o >= offset]
            if not got:
                return out
            out += got
            offset = got[-1][0] + 1


def batch_summary(log_dir: Path, upto: int | None = None) -> list[tuple[int, int, int]]:
    """(base offset, last offset, partition leader epoch) of each batch on disk: what a failure message
    should show when two replicas differ."""
    out = []
    for _base, raw in batches_on_disk(log_dir, upto):
        h = read_header(raw, 0)
        out.append((h.base_offset, h.last_offset, h.partition_leader_epoch))
    return out


def produce_to_leader(cluster: ReplicatedCluster, topic: str, partition: int, values: list[bytes],
                      acks: int = -1, timeout: float = 15.0) -> int:
    """Produce one batch of ``values`` to the partition's current leader (waiting until it leads: the state
    znode may name it before it has applied the state); the base offset. acks=-1 also proves that every
    ISR member is fetching."""
    from broker_wire import build_batch, produce

    def attempt() -> int | None:
        leader = cluster.state(topic, partition).leader
        with WireClient(cluster.brokers[leader].bootstrap, timeout=timeout) as c:
            res = produce(c, topic, partition, build_batch(values), acks=acks)
        return res.base_offset + 1 if res.error == 0 else None  # +1: offset 0 is a success too

    return wait_until(attempt, timeout, f"a produce to {topic}-{partition}'s leader") - 1
