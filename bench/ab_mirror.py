"""A/B of the mirror of two checkouts: copy throughput and the mirror's own CPU per message.

The exactly-once mirror (checkpoints + sync from the offline log, one batch per partition per produce
request) against the one before it, on the same machine in one session. Run it alternately with each
checkout on PYTHONPATH (a checkout's ``ferry/`` folder needs links to its package folders: ``for d in wire
zk broker client audit schemas mirror loaders; do ln -s ../$d ferry/$d; done``):

    PYTHONPATH=<before checkout> .venv/bin/python bench/ab_mirror.py before [--messages 400000]
    PYTHONPATH=<after checkout>  .venv/bin/python bench/ab_mirror.py after  [--messages 400000]

Each invocation starts ZooKeeper, one live and one offline broker, fills a 4-partition live topic per case
with ``--messages`` messages (CASES: 100-byte lz4 in producer batches of up to 10,000 messages; the same in
batches of 50, which the mirror coalesces; 200 random bytes uncompressed in ~1 MB batches, which travel
as they are), then for each runs a MirrorMaker in this process (2 streams, audit on, commit and audit
every 0.2 s as bench_mirror.py does) until every partition is committed to its end, 3 rounds each, every
round a fresh group (it copies the whole topic again, appended offline). Prints the best round's msgs/s and this process's CPU µs per message (the mirror's
threads; the brokers are other processes): on shared cores the CPU figure moves far less with other load.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from ferry.embedded import BrokerProcess, ZooKeeperServer
from ferry.mirror.mirror_maker import MirrorConfig, MirrorMaker
from ferry.mirror.status import mirror_status
from ferry.zk.cluster_registry import ClusterRegistry

PARTITIONS = 4


# (name, producer batch.num.messages, compression, value): small lz4 batches are coalesced by the mirror;
# ~1 MB uncompressed batches are not (each travels alone in a produce request of the new mirror)
CASES = (("lz4 100 B, batches <= 10000 msgs", 10_000, "lz4", b"x" * 100),
         ("lz4 100 B, batches <= 50 msgs", 50, "lz4", b"x" * 100),
         ("none 200 B random, ~1 MB batches", 10_000, "none", None))


def fill(bootstrap: str, topic: str, n: int, batch_messages: int, compression: str, value: bytes | None) -> None:
    import os

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "compression.type": compression,
                  "batch.size": 1_000_000, "batch.num.messages": batch_messages,
                  "queue.buffering.max.messages": 1_000_000, "acks": "all"})
    values = [value] if value is not None else [os.urandom(200) for _ in range(1000)]
    for i in range(n):
        payload = values[i % len(values)]
        while True:
            try:
                p.produce(topic, payload, key=str(i).encode(), partition=i % PARTITIONS,
                          headers=[("ferry.host", b"bench")])
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def copy(live_zk: str, offline_zk: str, topic: str, n: int) -> tuple[float, float]:
    """One mirror run from nothing to everything committed: (seconds, CPU seconds of this process)."""
    group = f"ab-{uuid.uuid4().hex[:8]}"
    mm = MirrorMaker(MirrorConfig(live_zk, offline_zk, include=topic, streams=2, group=group,
                                  commit_interval_s=0.2, audit_interval_s=0.2))
    t0, c0 = time.perf_counter(), cpu()
    mm.start()
    try:
        while time.perf_counter() - t0 < 600:
            rows = [r for r in mirror_status(live_zk, offline_zk, group).partitions if r.topic == topic]
            if len(rows) == PARTITIONS and all(r.committed is not None and r.committed == r.live_end for r in rows):
                break
            time.sleep(0.05)
        return time.perf_counter() - t0, cpu() - c0
    finally:
        mm.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("label")
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.messages
    tmp = Path(tempfile.mkdtemp(prefix="ferry-ab-mirror-"))
    zk = ZooKeeperServer(data_dir=tmp / "zk").start()
    brokers = []
    try:
        live_zk, offline_zk = f"{zk.connect}/ab/live", f"{zk.connect}/ab/offline"
        live = BrokerProcess(1, tmp / "live", live_zk, "live").start()
        offline = BrokerProcess(1, tmp / "offline", offline_zk, "offline").start()
        brokers = [live, offline]
        for k, (name, batch, compression, value) in enumerate(CASES):
            topic_base = f"ab-{k}"
            with ClusterRegistry(live_zk) as reg:
                reg.create_topic(topic_base, PARTITIONS)
            time.sleep(1.0)
            fill(live.bootstrap, topic_base, n, batch, compression, value)
            best, best_cpu = 0.0, float("inf")
            for _round in range(args.rounds):
                # a fresh group copies the whole topic again (appended to the offline topic)
                secs, cpus = copy(live_zk, offline_zk, topic_base, n)
                best, best_cpu = max(best, n / secs), min(best_cpu, cpus / n)
            print(f"{args.label}: {name:<34} {best:>10,.0f} msgs/s, mirror process CPU "
                  f"{best_cpu * 1e6:.2f} us/msg (best of {args.rounds})", flush=True)
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
