"""Replication's cost: producer throughput on three local brokers at RF 1 / acks=1 against RF 3 / acks=-1
(min.insync.replicas=2), and replication latency — leader append to the high watermark covering it — as
the leaders' own histogram (ferry_broker_replication_commit_seconds) records it, p50/p99 by interpolation
inside its buckets.

Both producers run in the same session against the same brokers: ferry's MessageSetProducer (batch 50,
200-byte messages, up to 5 batches in flight) and confluent-kafka (librdkafka, linger 5 ms). Report µs per
message and the ratio RF3/RF1 measured in one run, with the machine and date:

    .venv/bin/python bench/bench_replication.py [messages=500000]

Two more rows separate the costs: RF 1 with acks=-1 (the leader's fsync alone) and RF 3 with acks=1 (the
followers copy, nobody waits for them).
"""

from __future__ import annotations

import platform
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from ferry.client.message_set_producer import MessageSetProducer
from ferry.embedded import BrokerProcess, ZooKeeperServer
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.local_process import free_port

PAYLOAD = b"x" * 200
BATCH = 50


def message_sets(bootstrap: str, topic: str, n: int, acks: int) -> float:
    """µs per message for n messages in 50-message sets to partition 0."""
    p = MessageSetProducer(bootstrap, acks=acks)
    values = [PAYLOAD] * BATCH
    t0 = time.perf_counter()
    for _ in range(n // BATCH):
        p.send(topic, 0, values)
    p.flush()
    dt = time.perf_counter() - t0
    p.close()
    return dt / n * 1e6


def librdkafka(bootstrap: str, topic: str, n: int, acks: str) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.num.messages": 1000,
                  "enable.idempotence": acks == "all", "queue.buffering.max.messages": 200_000})
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, PAYLOAD, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    dt = time.perf_counter() - t0
    return dt / n * 1e6


def histogram(metrics_port: int) -> list[tuple[float, float]]:
    """Cumulative (upper bound, count) of the commit-latency histogram of one broker."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "ferry_broker_replication_commit_seconds_bucket":
                out.append((float(s.labels["le"]), s.value))
    return sorted(out)


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    total = buckets[-1][1] if buckets else 0
    if not total:
        return float("nan")
    rank = q * total
    lo_bound, lo_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lo_bound
            frac = (rank - lo_count) / max(count - lo_count, 1e-9)
            return lo_bound + (bound - lo_bound) * frac
        lo_bound, lo_count = bound, count
    return lo_bound


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500_000
    root = Path(tempfile.mkdtemp(prefix="ferry-bench-repl-"))
    zk = ZooKeeperServer(data_dir=root / "zk")
    zk.start()
    brokers: list[BrokerProcess] = []
    ports: list[int] = []
    try:
        chroot = f"{zk.connect}/bench"
        for i in (1, 2, 3):
            ports.append(free_port())
            b = BrokerProcess(i, root / f"b{i}" / "data", chroot, "live",
                              extra_args=("--metrics-port", str(ports[-1])))
            b.start()
            brokers.append(b)
        bootstrap = ",".join(b.bootstrap for b in brokers)
        with ClusterRegistry(chroot) as reg:
            for name, rf in (("rf1-sets", 1), ("rf3-sets", 3), ("rf1-rdk", 1), ("rf3-rdk", 3), ("rf1-sets-all", 1),
                             ("rf3-sets-one", 3)):
                reg.create_topic_with_assignment(name, {0: [1, 2, 3][:rf]}, {"min.insync.replicas": str(min(rf, 2))})
        time.sleep(2.0)
        rows = []
        rows.append(("message sets, RF 1, acks=1", message_sets(bootstrap, "rf1-sets", n, 1)))
        rows.append(("message sets, RF 3, acks=-1", message_sets(bootstrap, "rf3-sets", n, -1)))
        before = histogram(ports[0])
        extra = [("message sets, RF 1, acks=-1 (leader fsync only)", message_sets(bootstrap, "rf1-sets-all", n, -1)),
                 ("message sets, RF 3, acks=1 (followers copy, nobody waits)",
                  message_sets(bootstrap, "rf3-sets-one", n, 1))]
        rows.append(("librdkafka, RF 1, acks=1", librdkafka(bootstrap, "rf1-rdk", n, "1")))
        rows.append(("librdkafka, RF 3, acks=all", librdkafka(bootstrap, "rf3-rdk", n, "all")))
        hist = histogram(ports[0])
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "?")
        print(f"machine: {platform.node()} {cpu}, {len(open('/proc/cpuinfo').read().split('processor')) - 1} "
              f"cpus; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {n} messages per row")
        for label, us in rows + extra:
            print(f"| {label} | {us:.2f} µs/msg | {1e6 / us:,.0f} msg/s |")
        print(f"RF3/RF1 ratio (µs/msg): message sets {rows[1][1] / rows[0][1]:.2f}x, "
              f"librdkafka {rows[3][1] / rows[2][1]:.2f}x")
        for label, h in (("message sets (RF 3, acks=-1)", before), ("all runs", hist)):
            print(f"replication commit latency, {label}: p50 {quantile(h, 0.5) * 1e3:.2f} ms, "
                  f"p99 {quantile(h, 0.99) * 1e3:.2f} ms, batches {int(h[-1][1]) if h else 0}")
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
