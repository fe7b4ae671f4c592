"""Mirror throughput: ferry's raw-batch mirror vs a plain confluent-kafka consumer on the same data, and vs
a MirrorMaker-1-style copy (consume every message, produce it again).

Everything runs on this machine (ZooKeeper, one live and one offline broker); numbers are messages/s.

    .venv/bin/python bench/bench_mirror.py [--messages 500000] [--partitions 4] [--size 100] [--streams 2]
                                           [--linger-ms 10] [--batch-messages 10000] [--skip-mm1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from ferry.embedded import BrokerProcess, ZooKeeperServer
from ferry.mirror.mirror_maker import MirrorConfig, MirrorMaker
from ferry.mirror.status import mirror_status
from ferry.zk.cluster_registry import ClusterRegistry

TOPIC = "bench-events"


def produce(bootstrap: str, n: int, partitions: int, size: int, linger_ms: int, batch_messages: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "compression.type": "lz4",
                  "batch.size": 1_000_000, "batch.num.messages": batch_messages, "queue.buffering.max.messages": 1_000_000, "acks": "all"})
    payload = b"x" * size
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(TOPIC, payload, key=str(i).encode(), partition=i % partitions,
                          headers=[("ferry.host", b"bench")])
                break
            except BufferError:
                p.poll(0.05)
    left = p.flush(120)
    assert left == 0, f"{left} messages not delivered"
    return time.perf_counter() - t0


def plain_consume(bootstrap: str, n: int, partitions: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "fetch.max.bytes": 32 << 20, "max.partition.fetch.bytes": 4 << 20})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    got = 0
    t0 = time.perf_counter()
    deadline = t0 + 300
    while got < n and time.perf_counter() < deadline:
        for m in c.consume(10_000, 0.5):
            if m.error() is None:
                m.value()
                got += 1
    elapsed = time.perf_counter() - t0
    c.close()
    assert got >= n, f"consumer read {got} of {n}"
    return elapsed


def mm1_copy(src: str, dst: str, n: int, partitions: int) -> float:
    """MirrorMaker 1: decode each message and produce it again (same partition, key, value, headers)."""
    c = Consumer({"bootstrap.servers": src, "group.id": f"mm1-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  "fetch.max.bytes": 32 << 20, "max.partition.fetch.bytes": 4 << 20})
    p = Producer({"bootstrap.servers": dst, "linger.ms": 10, "compression.type": "lz4", "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000, "acks": "all", "enable.idempotence": True})
    c.assign([TopicPartition(TOPIC, q, 0) for q in range(partitions)])
    got = 0
    t0 = time.perf_counter()
    while got < n and time.perf_counter() - t0 < 600:
        for m in c.consume(10_000, 0.5):
            if m.error() is not None:
                continue
            while True:
                try:
                    p.produce(TOPIC + "-mm1", m.value(), m.key(), m.partition(), timestamp=m.timestamp()[1],
                              headers=m.headers())
                    break
                except BufferError:
                    p.poll(0.05)
            got += 1
        p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    c.close()
    assert left == 0 and got >= n
    return elapsed


def mirror_copy(live: str, offline: str, n: int, streams: int) -> tuple[float, int]:
    mm = MirrorMaker(MirrorConfig(live, offline, include=TOPIC, streams=streams, group="bench-mirror",
                                  commit_interval_s=0.2, audit_interval_s=0.2))
    t0 = time.perf_counter()
    mm.start()
    try:
        deadline = t0 + 600
        while time.perf_counter() < deadline:
            rows = [r for r in mirror_status(live, offline, "bench-mirror").partitions if r.topic == TOPIC]
            if rows and all(r.committed is not None and r.committed == r.live_end for r in rows):
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        mirrored = sum(r.offline_end or 0 for r in rows)
    finally:
        mm.stop()
    return elapsed, mirrored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--size", type=int, default=100, help="value bytes")
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--linger-ms", type=int, default=10, help="live producer's linger (batching)")
    ap.add_argument("--batch-messages", type=int, default=10_000,
                    help="live producer's batch.num.messages: small values make many small batches")
    ap.add_argument("--skip-mm1", action="store_true", help="skip the MirrorMaker-1-style comparison")
    args = ap.parse_args()
    n = args.messages
    with tempfile.TemporaryDirectory(prefix="ferry-bench-mirror-") as d:
        root = Path(d)
        zk = ZooKeeperServer(data_dir=root / "zk").start()
        brokers = []
        try:
            live_zk, offline_zk = f"{zk.connect}/bench/live", f"{zk.connect}/bench/offline"
            live = BrokerProcess(1, root / "live" / "data", live_zk, "live").start()
            offline = BrokerProcess(1, root / "offline" / "data", offline_zk, "offline").start()
            brokers = [live, offline]
            with ClusterRegistry(live_zk) as reg:
                reg.create_topic(TOPIC, args.partitions)
            with ClusterRegistry(offline_zk) as reg:
                reg.create_topic(TOPIC + "-mm1", args.partitions)
            time.sleep(1.0)
            t = produce(live.bootstrap, n, args.partitions, args.size, args.linger_ms, args.batch_messages)
            print(f"produced {n} messages of {args.size} B to {args.partitions} partitions in {t:.1f} s "
                  f"({n / t:,.0f} msgs/s; linger {args.linger_ms} ms, <= {args.batch_messages} per batch)")
            t = plain_consume(live.bootstrap, n, args.partitions)
            print(f"plain confluent-kafka consumer:   {n / t:>10,.0f} msgs/s  ({t:.2f} s)")
            t, mirrored = mirror_copy(live_zk, offline_zk, n, args.streams)
            print(f"ferry mirror ({args.streams} streams, raw batches, acks=all, committed): "
                  f"{n / t:>10,.0f} msgs/s  ({t:.2f} s, incl. start-up; {mirrored} messages in offline)")
            if not args.skip_mm1:
                t = mm1_copy(live.bootstrap, offline.bootstrap, n, args.partitions)
                print(f"MirrorMaker-1 style (decode + re-produce, librdkafka): {n / t:>10,.0f} msgs/s  ({t:.2f} s)")
        finally:
            for b in brokers:
                b.stop()
            zk.stop()


if __name__ == "__main__":
    main()
