"""A broker started by mistake beside a healthy cluster never acts on it: a second `ferry broker --id 1` (another
port and data dir) is refused at once naming the holder's address, and a broker whose port is taken fails before
it touches its data directory or ZooKeeper. Under acks=all production the healthy broker keeps every leadership
and no request fails; the failed process leaves no partition directory behind."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from ferry.embedded import free_port
from ferry.zk.cluster_registry import ClusterRegistry

pytestmark = pytest.mark.slow  # broker processes and a producer stream: not in the fast tier


def run_broker(broker_id: int, listen: str, data_dir: Path, zk: str, timeout: float = 60) -> tuple[int, str, float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "ferry.cli", "broker", "--id", str(broker_id), "--listen", listen,
                        "--data-dir", str(data_dir), "--zookeeper", zk, "--datacenter", "live"],
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stderr, time.monotonic() - t0


class Stream:
    """An acks=all idempotent producer sending until stopped; counts deliveries and failures."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.delivered = self.failed = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5, "message.timeout.ms": 60_000})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, _msg) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            self.errors.append(str(err))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set() and n < 1_000_000:
            self._producer.produce("guarded", b"%08d" % n, on_delivery=self._on_delivery)
            n += 1
            self._producer.poll(0.002)
        self._producer.flush(60)

    def __enter__(self) -> Stream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(90)


def leaders(zk: str) -> dict[int, tuple[int, int, list[int]]]:
    reg = ClusterRegistry(zk).start()
    try:
        return {p: (st.leader, st.leader_epoch, sorted(st.isr)) for p, st in reg.partition_states("guarded").items()}
    finally:
        reg.stop()


def test_a_second_broker_with_a_live_id_or_a_taken_port_never_acts_on_the_cluster(cluster_factory, tmp_path):
    cluster = cluster_factory(n_brokers=2)
    reg = ClusterRegistry(cluster.zk_connect).start()
    try:
        reg.create_topic("guarded", 4, {"min.insync.replicas": "2"}, replication_factor=2)
    finally:
        reg.stop()
    deadline = time.monotonic() + 30
    while any(len(isr) < 2 or leader < 0 for leader, _, isr in leaders(cluster.zk_connect).values()):
        assert time.monotonic() < deadline, leaders(cluster.zk_connect)
        time.sleep(0.2)
    before = leaders(cluster.zk_connect)
    healthy = cluster.brokers[1]

    with Stream(cluster.bootstrap, "guarded") as stream:
        time.sleep(1.0)
        # the same id, another port and data dir: refused at once, naming the live holder
        dup_dir = tmp_path / "mistaken-1"
        rc, err, took = run_broker(1, f"127.0.0.1:{free_port()}", dup_dir, cluster.zk_connect)
        assert rc == 1, err[-2000:]
        assert f"broker id 1 is held by a live broker at {healthy.bootstrap}" in err, err[-2000:]
        assert "Traceback" not in err and took < 15, (took, err[-2000:])
        assert not dup_dir.exists() or not any(dup_dir.iterdir()), sorted(p.name for p in dup_dir.iterdir())
        # a new id on the healthy broker's port: fails before its data dir or ZooKeeper
        port_dir = tmp_path / "mistaken-3"
        rc, err, _ = run_broker(3, healthy.bootstrap, port_dir, cluster.zk_connect)
        assert rc == 1 and "Address already in use" in err and "Traceback" not in err, err[-2000:]
        assert not port_dir.exists(), sorted(p.name for p in port_dir.iterdir())
        time.sleep(2.0)
    assert stream.failed == 0 and stream.delivered > 100, (stream.delivered, stream.failed, stream.errors[:5])
    after = leaders(cluster.zk_connect)
    assert after == before, f"leaderships or ISRs moved: {before} -> {after}"
    reg = ClusterRegistry(cluster.zk_connect).start()
    try:
        assert sorted(reg.brokers()) == [1, 2] and reg.brokers()[1].port == healthy.port
    finally:
        reg.stop()
    assert healthy.running and cluster.brokers[2].running
