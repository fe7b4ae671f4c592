"""kill -9 of the offline leader of a link's copy, ``--kills`` times during a steady stream (issue 39's third row).

ZooKeeper, one live `ferry broker`, ``--offline-brokers`` offline brokers (default 3; the link creates the offline
topic with replication factor min(3, brokers); ``min.insync.replicas=2``, so the copy's appends wait for a second
replica: acks=all semantics, docs/mirror.md). A link copies ``--partitions`` live partitions while a steady
producer (confluent-kafka, acks=all, idempotent: tests/mirror/mirror_harness.py's SteadyProducer) writes
``--rate`` msg/s to live. Each kill: the offline leader of one copied partition (in turn) gets SIGKILL, the bench
waits for a new leader, lets it copy alone for ``--alone`` s, and restarts the killed broker. At the end, once the
offline copy caught up: every partition's records (key, value, headers, timestamp: read_committed by
confluent-kafka) compared live against offline: missing, duplicated, out of order; and the mirror tier's counts
in the offline `_audit` against the producer's acknowledged counts (the books). Exit 1 on any difference.

    .venv/bin/python bench/bench_link_kills.py [--kills 10] [--rate 2000] [--partitions 2] [--offline-brokers 3]
        [--dir DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "mirror"))

from mirror_harness import SteadyProducer, audit_counts, read_log, wait_for, wait_partitions  # noqa: E402
from servers import drop_scratch, scratch_zookeeper  # noqa: E402

from ferry.embedded import BrokerProcess  # noqa: E402
from ferry.zk.cluster_registry import ClusterRegistry  # noqa: E402

TOPIC = "events"


def leader(zk: str, partition: int) -> int:
    with ClusterRegistry(zk) as reg:
        state = reg.partition_states(TOPIC).get(partition)
    return state.leader if state is not None else -1


def compare(live: list, offline: list) -> tuple[int, int, bool]:
    """(missing, duplicated or foreign, in order) of one partition's offline records against its live ones (the
    producer makes every record unique)."""
    missing = sum((Counter(live) - Counter(offline)).values())
    duplicated = sum((Counter(offline) - Counter(live)).values())
    wanted = set(live)
    seen: set = set()
    kept = [r for r in offline if r in wanted and not (r in seen or seen.add(r))]
    kept_set = set(kept)
    return missing, duplicated, kept == [r for r in live if r in kept_set]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--rate", type=int, default=2000, help="live msg/s")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--offline-brokers", type=int, default=3)
    ap.add_argument("--alone", type=float, default=2.0, help="seconds the new leader copies before the restart")
    ap.add_argument("--dir", help="parent of the bench's temporary directory (default: the system's)")
    args = ap.parse_args()
    if not 1 <= args.kills <= 100 or not 1 <= args.partitions <= 64 or not 2 <= args.offline_brokers <= 5 \
            or not 1 <= args.rate <= 50_000:
        ap.error("--kills 1-100, --partitions 1-64, --offline-brokers 2-5, --rate 1-50000")
    tmp, zk = scratch_zookeeper("ferry-bench-kills-", args.dir)
    brokers: list[BrokerProcess] = []
    steady = None
    try:
        live_zk, off_zk = f"{zk.connect}/b/live", f"{zk.connect}/b/offline"
        live = BrokerProcess(1, tmp / "live", live_zk, "live").start()
        brokers.append(live)
        extra = ("--zk-session-timeout-ms", "6000", "--override", "min.insync.replicas=2")
        offline = {i: BrokerProcess(i, tmp / f"offline-{i}" / "data", off_zk, "offline", extra_args=extra).start()
                   for i in range(1, args.offline_brokers + 1)}
        brokers += offline.values()
        off_bootstrap = ",".join(b.bootstrap for b in offline.values())
        with ClusterRegistry(live_zk) as reg:
            reg.create_topic(TOPIC, args.partitions)
        wait_partitions(live.bootstrap, TOPIC, args.partitions)
        subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "link", "create", "dc1", "--zookeeper", off_zk,
                        "--source-zookeeper", live_zk, "--include", TOPIC], check=True, capture_output=True, timeout=60)
        wait_partitions(off_bootstrap, TOPIC, args.partitions, timeout=60)
        with ClusterRegistry(off_zk) as reg:
            rf = {len(r) for r in reg.topic(TOPIC).replicas.values()}
        print(f"offline {TOPIC}: replication factor {sorted(rf)}, min.insync.replicas 2; live {args.rate} msg/s",
              flush=True)
        steady = SteadyProducer(live.bootstrap, {TOPIC: args.partitions}, rate=args.rate).start()
        t0 = time.monotonic()
        for k in range(args.kills):
            time.sleep(3)
            part = k % args.partitions
            victim = leader(off_zk, part)
            if victim not in offline:
                raise RuntimeError(f"kill {k + 1}: no offline leader of {TOPIC}-{part}")
            offline[victim].kill()
            t_kill = time.monotonic()
            wait_for(lambda v=victim, p=part: leader(off_zk, p) not in (v, -1), 60, "a new offline leader")
            took = time.monotonic() - t_kill
            time.sleep(args.alone)
            offline[victim].start(timeout=60)
            print(f"kill {k + 1}: broker {victim} (leader of {TOPIC}-{part}) killed -9, new leader "
                  f"{leader(off_zk, part)} after {took:.1f} s, restarted", flush=True)
        sent = steady.stop()
        streamed = time.monotonic() - t0
        print(f"live: {sent:,} messages acknowledged in {streamed:.0f} s", flush=True)

        def caught_up() -> bool:
            return read_log(off_bootstrap, {TOPIC: args.partitions}, timeout=30) == \
                read_log(live.bootstrap, {TOPIC: args.partitions}, timeout=30)

        try:
            wait_for(caught_up, 180, "the offline copy to equal the live log")
        except AssertionError as e:
            print(f"{e}: comparing what is there", flush=True)
        live_log = read_log(live.bootstrap, {TOPIC: args.partitions})
        off_log = read_log(off_bootstrap, {TOPIC: args.partitions})
        ok = sum(len(v) for v in live_log.values()) == sent
        for tp in sorted(live_log):
            missing, dup, ordered = compare(live_log[tp], off_log.get(tp, []))
            ok &= not missing and not dup and ordered
            print(f"{tp[0]}-{tp[1]}: live {len(live_log[tp]):,} records, offline {len(off_log.get(tp, [])):,}: "
                  f"{missing} missing, {dup} duplicated, {'in' if ordered else 'OUT OF'} order; records "
                  f"{'identical' if live_log[tp] == off_log.get(tp) else 'DIFFER'}", flush=True)
        try:
            wait_for(lambda: audit_counts(off_bootstrap, "mirror") == steady.counts, 90, "the mirror tier's counts")
            print(f"audit: the mirror tier's counts equal the producer's ({len(steady.counts)} buckets, "
                  f"{sum(steady.counts.values()):,} messages)", flush=True)
        except AssertionError:
            got = audit_counts(off_bootstrap, "mirror")
            ok = False
            print(f"audit: the mirror tier counts {sum(got.values()):,}, the producer {sum(steady.counts.values()):,}"
                  f" ({len(set(got.items()) ^ set(steady.counts.items()))} buckets differ)", flush=True)
        print("PASS" if ok else "FAIL", flush=True)
        return 0 if ok else 1
    finally:
        if steady is not None:
            steady.close()
        drop_scratch(tmp, zk, brokers)


if __name__ == "__main__":
    sys.exit(main())
