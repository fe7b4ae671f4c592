"""Live-to-offline latency of a mirror link under a steady stream (issue 39's second row).

ZooKeeper, one live and one offline `ferry broker`; a link copies the topic (``--partitions`` partitions). A
producer (confluent-kafka, acks=all, linger 1 ms) in this process writes ``--rate`` msg/s to live, its send time
(time.time(), when produce() is called) in each value; one consumer reads the live topic and one the offline copy,
each in a process of its own (no interpreter lock shared with the producer or each other). Per message: the
arrival time at each consumer minus the send time. After ``--warmup`` s (not counted), ``--seconds`` s are
measured: p50/p99/p99.9 of both, and the difference (what the copy adds). Every measured message must arrive at
both consumers (exit 1 otherwise). By default a broker's consumers see only flushed messages (the paper's
rule, docs/broker.md: every 200 ms or 10,000 messages), on each side of the copy; ``--broker-arg`` passes flags
to both brokers (``--broker-arg=--consumers-see-unflushed``, ``--broker-arg=--flush-ms=10``).

    .venv/bin/python bench/bench_link_latency.py [--rate 10000] [--seconds 60] [--warmup 10] [--partitions 4]
        [--broker-arg=--consumers-see-unflushed]
"""

from __future__ import annotations

import argparse
import array
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mirror_pipeline import percentile, proc_cpu  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from servers import drop_scratch, scratch_zookeeper  # noqa: E402

from ferry.embedded import BrokerProcess  # noqa: E402
from ferry.zk.cluster_registry import ClusterRegistry  # noqa: E402

TOPIC = "lat"
VALUE = struct.Struct(">dB")  # send time, 1 = measured (0 = warm-up)


def reader(bootstrap: str, partitions: int, expected_path: str, out_path: str, timeout_s: float) -> None:
    """A consumer process: reads the topic from offset 0 until the number in ``expected_path`` (written once the
    producer stopped) of measured messages arrived or ``timeout_s`` passed; writes their latencies (seconds)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{os.getpid()}", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "fetch.min.bytes": 1, "auto.offset.reset": "earliest"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # the offline topic exists once the link created it
        md = c.list_topics(TOPIC, timeout=5)
        t = md.topics.get(TOPIC)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            break
        time.sleep(0.2)
    c.assign([TopicPartition(TOPIC, q, 0) for q in range(partitions)])
    out = array.array("d")
    expected = None
    while time.monotonic() < deadline and (expected is None or len(out) < expected):
        for m in c.consume(1000, 0.1):
            if m.error() is None and len(m.value()) == VALUE.size:
                now = time.time()
                sent, measured = VALUE.unpack(m.value())
                if measured:
                    out.append(now - sent)
        if expected is None and os.path.exists(expected_path):
            expected = int(Path(expected_path).read_text())
    c.close()
    with open(out_path, "wb") as f:
        out.tofile(f)


def main() -> int:
    if sys.argv[1:2] == ["--run-reader"]:
        bootstrap, partitions, expected_path, out_path, timeout_s = sys.argv[2:7]
        reader(bootstrap, int(partitions), expected_path, out_path, float(timeout_s))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=10_000, help="msg/s")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured seconds")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds produced before the measured ones")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--broker-arg", action="append", default=[], metavar="ARG",
                    help="passed to both brokers (repeatable), e.g. --broker-arg=--consumers-see-unflushed")
    ap.add_argument("--dir", help="parent of the bench's temporary directory (default: the system's)")
    args = ap.parse_args()
    if not 1 <= args.rate <= 100_000 or not 1 <= args.seconds <= 600 or not 0 <= args.warmup <= 120 \
            or not 1 <= args.partitions <= 64:
        ap.error("--rate 1-100000, --seconds 1-600, --warmup 0-120, --partitions 1-64")
    tmp, zk = scratch_zookeeper("ferry-bench-latency-", args.dir)
    brokers: list[BrokerProcess] = []
    readers: dict[str, subprocess.Popen] = {}
    try:
        live_zk, off_zk = f"{zk.connect}/b/live", f"{zk.connect}/b/offline"
        live = BrokerProcess(1, tmp / "live", live_zk, "live", extra_args=args.broker_arg).start()
        offline = BrokerProcess(1, tmp / "offline", off_zk, "offline", extra_args=args.broker_arg).start()
        brokers += [live, offline]
        with ClusterRegistry(live_zk) as reg:
            reg.create_topic(TOPIC, args.partitions)
        time.sleep(1.0)
        subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "link", "create", "dc1", "--zookeeper", off_zk,
                        "--source-zookeeper", live_zk, "--include", TOPIC], check=True, capture_output=True, timeout=60)
        expected_path = tmp / "expected"
        limit = args.warmup + args.seconds + 120
        for name, b in (("live", live), ("offline", offline)):
            readers[name] = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--run-reader",
                                              b.bootstrap, str(args.partitions), str(expected_path),
                                              str(tmp / f"{name}.lat"), str(limit)])
        p = Producer({"bootstrap.servers": live.bootstrap, "linger.ms": 1, "acks": "all"})
        time.sleep(3.0)  # both readers assigned
        sent = measured = 0
        t0 = time.perf_counter()
        c0 = None
        total = args.warmup + args.seconds
        while (now := time.perf_counter()) - t0 < total:
            in_window = now - t0 >= args.warmup
            if in_window and c0 is None:
                c0, w0 = proc_cpu(live) + proc_cpu(offline), now
            due = int((now - t0) * args.rate)
            while sent < due:
                p.produce(TOPIC, VALUE.pack(time.time(), 1 if in_window else 0), partition=sent % args.partitions)
                sent += 1
                measured += in_window
            p.poll(0)
            time.sleep(0.0005)
        brokers_cpu = (proc_cpu(live) + proc_cpu(offline) - c0) / (time.perf_counter() - w0)
        left = p.flush(30)
        expected_path.write_text(str(measured))
        for r in readers.values():
            r.wait(limit)
        lat = {}
        for name in readers:
            xs = array.array("d")
            data = (tmp / f"{name}.lat").read_bytes()
            xs.frombytes(data)
            lat[name] = sorted(xs)
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {sent:,} produced ({measured:,} measured over "
              f"{args.seconds:.0f} s after {args.warmup:.0f} s warm-up, {measured / args.seconds:,.0f} msg/s), "
              f"{left} undelivered; both brokers {brokers_cpu:.2f} cores busy; broker args {args.broker_arg or 'none'}",
              flush=True)
        qs = (0.5, 0.99, 0.999)
        for name, xs in lat.items():
            print(f"{name:8} {len(xs):,} received: " + ", ".join(f"p{q * 100:g} {percentile(xs, q) * 1000:.1f} ms"
                                                                 for q in qs) + f", max {xs[-1] * 1000:.1f} ms",
                  flush=True)
        print("the copy adds: " + ", ".join(
            f"p{q * 100:g} {(percentile(lat['offline'], q) - percentile(lat['live'], q)) * 1000:+.1f} ms" for q in qs),
            flush=True)
        complete = left == 0 and all(len(xs) == measured for xs in lat.values())
        print("every measured message arrived at both consumers" if complete else "MESSAGES MISSING", flush=True)
        return 0 if complete else 1
    finally:
        for r in readers.values():
            if r.poll() is None:
                r.kill()
                r.wait(10)
        drop_scratch(tmp, zk, brokers)


if __name__ == "__main__":
    sys.exit(main())
