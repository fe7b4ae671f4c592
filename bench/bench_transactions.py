"""Transactions' cost: µs per message of librdkafka's transactional producer against the idempotent one (the
same acks=all, the same batching) in one run, on two local brokers with a two-partition topic led by one
broker each (the transaction coordinator is one of them: the markers go to the other by WriteTxnMarkers).

A transaction costs a fixed set of round trips (AddPartitionsToTxn per new partition, EndTxn, a marker per
partition with its ISR/flush wait, ZooKeeper writes of the coordinator's state), so the rows vary the
transaction size: 100, 1,000 and 10,000 messages per commit. Interleaved idempotent rows show the drift of a
shared 2-core machine:

    .venv/bin/python bench/bench_transactions.py [messages=100000]
"""

from __future__ import annotations

import platform
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from ferry.embedded import BrokerProcess, ZooKeeperServer
from ferry.zk.cluster_registry import ClusterRegistry

PAYLOAD = b"x" * 200
PARTITIONS = 2


def _produce(p: Producer, topic: str, n: int, offset: int) -> None:
    for i in range(n):
        while True:
            try:
                p.produce(topic, PAYLOAD, partition=(offset + i) % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    p.poll(0)


def _config(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 1000,
            "enable.idempotence": True, "queue.buffering.max.messages": 200_000}


def idempotent(bootstrap: str, topic: str, n: int) -> float:
    p = Producer(_config(bootstrap))
    _produce(p, topic, PARTITIONS, 0)  # warm-up (connections, metadata, producer id): not timed
    p.flush(30)
    t0 = time.perf_counter()
    _produce(p, topic, n, 0)
    p.flush(120)
    return (time.perf_counter() - t0) / n * 1e6


def transactional(bootstrap: str, topic: str, n: int, per_txn: int) -> float:
    p = Producer({**_config(bootstrap), "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    p.begin_transaction()  # warm-up transaction (connections, metadata): not timed
    _produce(p, topic, PARTITIONS, 0)
    p.commit_transaction(30)
    t0 = time.perf_counter()
    done = 0
    while done < n:
        k = min(per_txn, n - done)
        p.begin_transaction()
        _produce(p, topic, k, done)
        p.commit_transaction(60)
        done += k
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    root = Path(tempfile.mkdtemp(prefix="ferry-bench-txn-"))
    zk = ZooKeeperServer(data_dir=root / "zk")
    zk.start()
    brokers: list[BrokerProcess] = []
    try:
        chroot = f"{zk.connect}/bench"
        for i in (1, 2):
            b = BrokerProcess(i, root / f"b{i}" / "data", chroot, "live")
            b.start()
            brokers.append(b)
        bootstrap = ",".join(b.bootstrap for b in brokers)
        rows = [("idempotent", None), ("transactional, 100 msgs/txn", 100), ("idempotent", None),
                ("transactional, 1,000 msgs/txn", 1000), ("idempotent", None),
                ("transactional, 10,000 msgs/txn", 10_000), ("idempotent", None)]
        with ClusterRegistry(chroot) as reg:
            for j in range(len(rows)):
                reg.create_topic_with_assignment(f"t{j}", {0: [1], 1: [2]})
        time.sleep(2.0)
        results = []
        for j, (label, per_txn) in enumerate(rows):
            us = idempotent(bootstrap, f"t{j}", n) if per_txn is None else transactional(bootstrap, f"t{j}", n, per_txn)
            results.append((label, us))
            print(f"  {label}: {us:.2f} µs/msg", flush=True)
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "?")
        load = open("/proc/loadavg").read().split()[:3]
        print(f"machine: {platform.node()} {cpu}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
              f"{n} messages of {len(PAYLOAD)} bytes per row; load average {' '.join(load)}")
        base = sorted(us for label, us in results if label == "idempotent")
        median = base[len(base) // 2]
        print("| row | µs/msg | msg/s | vs idempotent (median of the idempotent rows) |")
        print("| --- | ---: | ---: | ---: |")
        for label, us in results:
            print(f"| {label} | {us:.2f} | {1e6 / us:,.0f} | {us / median:.2f}x |")
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
