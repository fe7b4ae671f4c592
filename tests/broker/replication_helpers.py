"""Helpers of the replication tests: a cluster of broker processes in one chroot, the partitions' state
as ZooKeeper holds it, and the replicas' logs decoded from their files."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

from ferry.embedded import BrokerProcess
from ferry.wire.record.record_batch import read_header
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.local_process import free_port
from ferry.zk.znodes import PartitionState

# fast failure detection for tests: a 6 s ZooKeeper session, a 3 s replica lag
FAST = ("--zk-session-timeout-ms", "6000", "--flush-ms", "20",
        "--override", "replica.lag.time.max.ms=3000", "--override", "replica.fetch.wait.max.ms=200",
        "--override", "controlled.shutdown.retry.backoff.ms=1000")


class ReplicatedCluster:
    def __init__(self, zk_base: str, root: Path, n: int, extra_args: tuple[str, ...] = (),
                 order: list[int] | None = None, metrics: bool = False) -> None:
        self.zk = f"{zk_base}/t/{uuid.uuid4().hex[:12]}/live"
        self.root = root
        self.extra_args = tuple(extra_args)
        self.brokers: dict[int, BrokerProcess] = {}
        self.registry = ClusterRegistry(self.zk).start()
        self.metrics_ports: dict[int, int] = {}
        for i in (order or range(1, n + 1)):
            args = self.extra_args
            if metrics:
                self.metrics_ports[i] = free_port("127.0.0.1")
                args = (*args, "--metrics-port", str(self.metrics_ports[i]))
            self.brokers[i] = BrokerProcess(i, root / f"broker-{i}" / "data", self.zk, "live", extra_args=args)
            self.brokers[i].start()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for i, b in sorted(self.brokers.items()) if b.running)

    def state(self, topic: str, partition: int) -> PartitionState:
        return self.registry.partition_states(topic)[partition]

    def wait_state(self, topic: str, partition: int, pred, timeout: float = 30.0, what: str = "") -> PartitionState:
        deadline = time.monotonic() + timeout
        st = None
        while time.monotonic() < deadline:
            st = self.state(topic, partition)
            if pred(st):
                return st
            time.sleep(0.05)
        raise AssertionError(f"{topic}-{partition}: {what or 'state'} not reached in {timeout}s; last {st}")

    def wait_isr(self, topic: str, partitions: int, size: int, timeout: float = 30.0) -> None:
        for p in range(partitions):
            self.wait_state(topic, p, lambda s: len(s.isr) == size and s.leader >= 0, timeout,
                            f"ISR of {size}")

    def metric(self, broker_id: int, name: str) -> float:
        """One sample of the broker's /metrics (summed over labels)."""
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_ports[broker_id]}/metrics", timeout=5).read()
        return sum(s.value for fam in text_string_to_metric_families(text.decode())
                   for s in fam.samples if s.name == name)

    def kill(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        if b.proc is not None and b.proc.poll() is None:
            b.proc.send_signal(signal.SIGKILL)
            b.proc.wait(10)

    def pause(self, broker_id: int) -> None:
        self.brokers[broker_id].proc.send_signal(signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        self.brokers[broker_id].proc.send_signal(signal.SIGCONT)

    def restart(self, broker_id: int) -> None:
        self.kill(broker_id)
        self.brokers[broker_id].start(timeout=60)

    def log_dir(self, broker_id: int, topic: str, partition: int) -> Path:
        return self.brokers[broker_id].data_dir / f"{topic}-{partition}"

    def stop(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None and b.proc.poll() is None:
                try:
                    b.proc.send_signal(signal.SIGCONT)
                except ProcessLookupError:
                    pass
            b.stop()
        self.registry.stop()


def batches_on_disk(log_dir: Path, upto: int | None = None) -> list[tuple[int, bytes]]:
    """(base offset, whole batch bytes) of every batch in the segment files, in order, below ``upto``:
    followers write the leader's batches as they are, offsets and leader epochs included."""
    out: list[tuple[int, bytes]] = []
    for seg in sorted(log_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            h = read_header(data, pos)
            if h.batch_length <= 0 or pos + h.size > len(data):
                break
            if upto is not None and h.base_offset >= upto:
                return out
            out.append((h.base_offset, data[pos:pos + h.size]))
            pos += h.size
    return out
