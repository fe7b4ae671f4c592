"""Mirror pipelining (issue 20 goal 2): backlog copy rate against a plain MessageSetConsumer reading the same
live data in the same run, and the latency the mirror adds over reading the live cluster directly.

ZooKeeper, one live and one offline `ferry broker` (ferry.embedded). Backlog: ``--messages`` 200-byte random
messages in sets of 50 (MessageSetProducer, acks=1) over ``--partitions`` live partitions; then (1)
MessageSetConsumer, in a new process of its own, reads every partition from the log start to its end, one
after the other, every record's value materialised (CRCs not checked: the bench's lean consumer setting);
(2) a MirrorMaker in this process (``--streams`` streams, audit on, commit every 0.2 s) copies the topic;
its rate counts from the first message in the offline log to the last (every batch is acknowledged with
acks=all; start-up and the first sync excluded), CPU is this process's user+sys over that time; the time to
the last commit is printed too. Each phase also prints how many of the machine's cores were busy and the
machine's CPU per message in all (/proc/stat: every process, the kernel and its softirqs), which tells a
phase bound by the cores from one bound by waiting. Every dirty page is written out (``sync``) before each
timed phase, so that neither phase pays for the kernel's writeback of the one before it. ``--processes N``
copies with N `ferry mirror` processes in one group instead (one interpreter lock each), timed from the
moment the group settled. Latency: a producer paced at ``--rate`` msg/s (send time in the value) for
``--seconds``; one librdkafka consumer reads the live topic, another the offline copy; p50/p99 of receive
minus send time for each, and the difference (what the mirror adds).

On a VM whose balloon driver reports free pages to the host (``/sys/module/page_reporting``), every page the
offline broker's new data lands in is faulted in from the host again, which the reader never pays; the
bench says so when it is on (bench/RESULTS.md, "Mirror backlog copy re-measured").

    .venv/bin/python bench/bench_mirror_pipeline.py [--messages 1000000] [--partitions 4] [--streams 1]
        [--processes N] [--rounds 2] [--rate 10000] [--seconds 10] [--flush-ms 20] [--skip-latency]

``BENCH_MIRROR_DIR=/path/to/old/mirror`` runs another checkout's mirror package (the "before" rows).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

if os.environ.get("BENCH_MIRROR_DIR"):  # before `ferry.mirror` is imported: another checkout's mirror
    import ferry

    _pkg = types.ModuleType("ferry.mirror")
    _pkg.__path__ = [os.environ["BENCH_MIRROR_DIR"]]
    sys.modules["ferry.mirror"] = _pkg
    ferry.mirror = _pkg

from common import payloads  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from ferry.client.group_store import read_offsets, read_owners  # noqa: E402
from ferry.client.message_set_consumer import MessageSetConsumer  # noqa: E402
from ferry.client.message_set_producer import MessageSetProducer  # noqa: E402
from ferry.client.wire_client import WireClient  # noqa: E402
from ferry.embedded import BrokerProcess, ZooKeeperServer  # noqa: E402
from ferry.mirror.mirror_maker import MirrorConfig, MirrorMaker  # noqa: E402
from ferry.wire.protocol.list_offsets import LATEST_TIMESTAMP  # noqa: E402
from ferry.wire.record.message_set_builder import MessageSetBuilder  # noqa: E402
from ferry.zk.cluster_registry import ClusterRegistry  # noqa: E402

BATCH = 50
SIZE = 200
_T = struct.Struct(">d")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine_cpu() -> float:
    """Seconds of CPU the whole machine has been busy (all cores, every process and the kernel: /proc/stat).

    A phase's share of it says whether the phase was bound by the machine's cores (busy ~ all of them) or by
    something else, and its CPU per message in all: what the copy costs the machine, kernel and softirqs
    included, against what the reader costs it."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def machine_line(busy: float, secs: float, n: int) -> str:
    return (f"machine {busy / secs:.2f} of {os.cpu_count()} cores busy, {busy / n * 1e6:.2f} us CPU/msg in all")


def proc_cpu(proc) -> float:
    """user+sys seconds of a broker process or a Popen (/proc)."""
    with open(f"/proc/{getattr(proc, 'proc', proc).pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    builder = MessageSetBuilder(SIZE)
    values = payloads(SIZE)
    sets = [builder.build(values[i:i + BATCH]) for i in range(0, len(values) - BATCH + 1, BATCH)]
    with MessageSetProducer(bootstrap, acks=1, max_in_flight=64, client_id="bench-fill") as p:
        for i in range(n // BATCH):
            p.send(topic, i % partitions, sets[i % len(sets)])
        p.flush()


def raw_read(bootstrap: str, topic: str, partitions: int,
             check_crcs: bool = False) -> tuple[int, float, float, float]:
    """(messages, seconds, CPU seconds, machine CPU seconds) for MessageSetConsumer reading every partition to
    its end."""
    got, secs, cpus, busy = 0, 0.0, 0.0, 0.0
    for part in range(partitions):
        with MessageSetConsumer(bootstrap, topic, part, "earliest", 1 << 20, max_wait_ms=0, check_crcs=check_crcs,
                                stop_at_end=True, idle_timeout_s=60) as c:
            t0, c0, m0 = time.perf_counter(), cpu(), machine_cpu()
            for s in c.message_sets():
                got += sum(1 for v in s.values() if v is not None)
            secs += time.perf_counter() - t0
            cpus += cpu() - c0
            busy += machine_cpu() - m0
    return got, secs, cpus, busy


def reader_process(bootstrap: str, topic: str, partitions: int,
                   check_crcs: bool = False) -> tuple[int, float, float, float]:
    """raw_read in a new interpreter of its own: read in this process after a mirror had run in it, the reader
    ran in one of two modes, 0.18-0.21 or 0.29-0.33 µs of CPU a message for the same code and data (its
    allocator's state), which flattered the mirror in a third of the rounds."""
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--run-reader", bootstrap, topic,
                          str(partitions), "1" if check_crcs else "0"], capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"the reader failed: {(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    n, secs, cpus, busy = out.stdout.split()[-4:]
    return int(n), float(secs), float(cpus), float(busy)


def read_phase(bootstrap: str, topic: str, partitions: int, check_crcs: bool, prefix: str) -> float:
    """One timed reader phase after the dirty pages are written out: prints its line, returns msg/s."""
    settle()
    n, secs, cpus, busy = reader_process(bootstrap, topic, partitions, check_crcs=check_crcs)
    label = "MessageSetConsumer, CRCs checked (its default)" if check_crcs else "MessageSetConsumer"
    print(f"{prefix}: {label} {n:,} msgs {n / secs:,.0f} msg/s {cpus / n * 1e6:.2f} us CPU/msg; "
          f"{machine_line(busy, secs, n)}", flush=True)
    return n / secs


def settle() -> None:
    """Write every dirty page out before a measured phase: the kernel's writeback of the mirror's last copy
    (~800 MB) otherwise runs during the next phase and takes CPU from whichever phase comes next."""
    os.sync()
    time.sleep(0.2)


def page_reporting() -> str | None:
    """A warning if the guest hands free pages back to its host (virtio-balloon free page reporting)."""
    try:
        order = int(Path("/sys/module/page_reporting/parameters/page_reporting_order").read_text())
    except (OSError, ValueError):
        return None
    if order > 10:  # above the largest buddy order: nothing is reported
        return None
    return (f"note: free page reporting is on (order {order}): the offline broker's new pages are faulted in "
            "from the host; as root, 'echo 11 > /sys/module/page_reporting/parameters/page_reporting_order' "
            "turns it off until reboot")


def end_offsets(client: WireClient, topic: str, partitions: int) -> int:
    got = client.list_offsets({(topic, q): LATEST_TIMESTAMP for q in range(partitions)})
    return sum(r.offset for r in got.values() if not r.error_code and r.offset > 0)


def live_end(live: BrokerProcess, topic: str, partitions: int) -> int:
    """Messages in the live topic (the backlog to copy)."""
    src = WireClient(live.bootstrap, client_id="bench-watch")
    try:
        return end_offsets(src, topic, partitions)
    finally:
        src.close()


def mirror_copy(live: BrokerProcess, offline: BrokerProcess, live_zk: str, offline_zk: str, topic: str,
                partitions: int, streams: int, **config) -> tuple[int, float, float, float, float]:
    """(messages timed, seconds to acknowledged, seconds to committed, CPU seconds to acknowledged, machine CPU
    seconds to acknowledged).

    The clock starts when the offline log holds its first message (start-up and the first sync excluded) and
    stops when it holds them all: every batch is written with acks=all, so that is the copy's end. The
    mirror commits the live offsets after those acks, every 0.2 s; the time to the last commit is returned
    too. Both are watched from one open connection per cluster and one ZooKeeper session, every 20 ms:
    the mirror runs in this process, so the watching must cost it little CPU.
    """
    group = f"bench-{uuid.uuid4().hex[:8]}"
    total = live_end(live, topic, partitions)
    mm = MirrorMaker(MirrorConfig(live_zk, offline_zk, include=topic, streams=streams, group=group,
                                  commit_interval_s=0.2, audit_interval_s=1.0, **config))
    reg = ClusterRegistry(live_zk).start()
    watch = WireClient(offline.bootstrap, client_id="bench-watch")
    base = end_offsets(watch, topic, partitions)  # a copy left by an earlier round
    mm.start()
    t0 = c0 = m0 = None
    first = base
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            got = end_offsets(watch, topic, partitions)
            if t0 is None and got > base:
                t0, c0, m0, first = time.perf_counter(), cpu(), machine_cpu(), got
            if got >= base + total:
                acked, acked_cpu, acked_busy = time.perf_counter() - t0, cpu() - c0, machine_cpu() - m0
                break
            time.sleep(0.02)
        else:
            raise RuntimeError("the mirror did not finish in 600 s")
        while time.monotonic() < deadline:
            done = read_offsets(reg.client, group)
            if sum(v for (t, _), v in done.items() if t == topic) >= total:
                return base + total - first, acked, time.perf_counter() - t0, acked_cpu, acked_busy
            time.sleep(0.02)
        raise RuntimeError("the mirror did not commit in 600 s")
    finally:
        mm.stop()
        watch.close()
        reg.stop()


def mirror_processes(live: BrokerProcess, offline: BrokerProcess, live_zk: str, offline_zk: str, topic: str,
                     partitions: int, streams: int, processes: int) -> tuple[int, float, float, list[float], float]:
    """(messages timed, seconds, CPU seconds of the mirror processes, of the live and offline broker, machine CPU
    seconds) for ``processes`` `ferry mirror` processes in one group, as deployed: one interpreter lock each.

    They join the group one after the other, and a partition changes hands while the copy runs. The clock
    therefore starts once every partition is owned and the owners are as many as the processes. It stops
    when the offline log holds everything; what was copied before the clock started is not counted.
    """
    group = f"bench-{uuid.uuid4().hex[:8]}"
    total = live_end(live, topic, partitions)
    reg = ClusterRegistry(live_zk).start()
    watch = WireClient(offline.bootstrap, client_id="bench-watch")
    base = end_offsets(watch, topic, partitions)
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--run-mirror", "--", "mirror",
                               "--source-zookeeper", live_zk, "--target-zookeeper", offline_zk, "--include", topic,
                               "--streams", str(streams), "--group", group, "--commit-interval", "0.2",
                               "--no-schemas", "--log-level", "WARNING"], env=dict(os.environ))
             for _ in range(processes)]
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            owners = {p: o for (t, p), o in read_owners(reg.client, group).items() if t == topic}
            if len(owners) == partitions and len(set(owners.values())) >= min(processes * streams, partitions):
                break
            time.sleep(0.02)
        else:
            raise RuntimeError("the mirror group did not settle in 600 s")
        t0, c0, first = time.perf_counter(), sum(proc_cpu(p) for p in procs), end_offsets(watch, topic, partitions)
        b0, m0 = [proc_cpu(live), proc_cpu(offline)], machine_cpu()
        if first >= base + total:
            raise RuntimeError("the copy ended before the group settled: use more --messages")
        while time.monotonic() < deadline:
            if end_offsets(watch, topic, partitions) >= base + total:
                return (base + total - first, time.perf_counter() - t0, sum(proc_cpu(p) for p in procs) - c0,
                        [proc_cpu(live) - b0[0], proc_cpu(offline) - b0[1]], machine_cpu() - m0)
            time.sleep(0.02)
        raise RuntimeError("the mirror did not finish in 600 s")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        watch.close()
        reg.stop()


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def latency(live: BrokerProcess, offline: BrokerProcess, live_zk: str, offline_zk: str, rate: int,
            seconds: float, partitions: int, streams: int) -> dict:
    topic = f"lat-{uuid.uuid4().hex[:6]}"
    with ClusterRegistry(live_zk) as reg:
        reg.create_topic(topic, partitions)
    time.sleep(1.0)
    # the mirror in a process of its own (`ferry mirror`, as deployed): it shares no interpreter lock with
    # the paced producer and the two readers of this process
    mirror = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--run-mirror", "--",
                               "mirror", "--source-zookeeper", live_zk, "--target-zookeeper", offline_zk,
                               "--include", topic, "--streams", str(streams), "--group", f"lat-{uuid.uuid4().hex[:6]}",
                               "--no-schemas", "--log-level", "WARNING"], env=dict(os.environ))
    p = Producer({"bootstrap.servers": live.bootstrap, "linger.ms": 1, "acks": "all"})
    # the offline topic exists once the mirror created it: warm both paths up first
    for _ in range(100):
        p.produce(topic, b"warm", partition=0)
    p.flush(30)
    results: dict[str, list[float]] = {"live": [], "offline": []}
    stop = threading.Event()

    def read(name: str, bootstrap: str) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{name}-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 100, "fetch.min.bytes": 1,
                      "auto.offset.reset": "earliest"})
        deadline = time.monotonic() + 60
        while True:  # the offline topic appears when the mirror created it
            md = c.list_topics(topic, timeout=5)
            if topic in md.topics and not md.topics[topic].error and len(md.topics[topic].partitions) == partitions:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: topic {topic} not there")
            time.sleep(0.2)
        c.assign([TopicPartition(topic, q, 0) for q in range(partitions)])
        out = results[name]
        while not stop.is_set():
            for m in c.consume(1000, 0.1):
                if m.error() is None and len(m.value()) == 8:
                    out.append(time.time() - _T.unpack(m.value())[0])
        c.close()

    readers = [threading.Thread(target=read, args=("live", live.bootstrap)),
               threading.Thread(target=read, args=("offline", offline.bootstrap))]
    for t in readers:
        t.start()
    time.sleep(3.0)
    sent = 0
    m0 = proc_cpu(mirror)
    t0 = time.perf_counter()
    while (now := time.perf_counter()) - t0 < seconds:
        due = int((now - t0) * rate)
        while sent < due:
            p.produce(topic, _T.pack(time.time()), partition=sent % partitions)
            sent += 1
        p.poll(0)
        time.sleep(0.001)
    p.flush(30)
    mirror_cpu = (proc_cpu(mirror) - m0) / (time.perf_counter() - t0)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and min(len(v) for v in results.values()) < sent:
        time.sleep(0.1)
    stop.set()
    for t in readers:
        t.join(10)
    mirror.terminate()
    mirror.wait(30)
    out = {"sent": sent, "mirror_cpu": mirror_cpu}
    for name, xs in results.items():
        out[name] = (len(xs), percentile(xs, 0.5) * 1000, percentile(xs, 0.99) * 1000)
    return out


def main() -> None:
    if "--run-mirror" in sys.argv:  # the latency part's mirror process (with BENCH_MIRROR_DIR's package)
        from ferry.cli import main as ferry_main

        sys.exit(ferry_main(sys.argv[sys.argv.index("--") + 1:]))
    if "--run-reader" in sys.argv:  # reader_process's reader
        bootstrap, topic, partitions, check = sys.argv[sys.argv.index("--run-reader") + 1:][:4]
        print(*raw_read(bootstrap, topic, int(partitions), check_crcs=check == "1"))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--processes", type=int, default=0,
                    help="backlog copy by this many `ferry mirror` processes in one group (0: one MirrorMaker in "
                         "this process)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--flush-ms", type=int, default=None, help="log.flush.interval.ms of both brokers")
    ap.add_argument("--flush-messages", type=int, default=None, help="log.flush.interval.messages of both brokers")
    ap.add_argument("--checked-reader", action="store_true",
                    help="also read with MessageSetConsumer's default check_crcs=True (the mirror checks every CRC) "
                         "and give the ratio against that too")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-backlog", action="store_true")
    ap.add_argument("--coalesce-bytes", type=int, default=None, help="MirrorConfig.coalesce_bytes (default: its own)")
    ap.add_argument("--max-in-flight", type=int, default=None, help="MirrorConfig.max_in_flight (after only)")
    args = ap.parse_args()
    # stopped by timeout(1) or kill: exit through the finally below, which stops ZooKeeper and the brokers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    label = "before" if os.environ.get("BENCH_MIRROR_DIR") else "after"
    if note := page_reporting():
        print(note, flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-mirror-"))
    zk = ZooKeeperServer(data_dir=tmp / "zk").start()
    extra = (("--flush-ms", str(args.flush_ms)) if args.flush_ms else ()) + (
        ("--flush-messages", str(args.flush_messages)) if args.flush_messages else ())
    brokers = []
    try:
        live_zk, offline_zk = f"{zk.connect}/b/live", f"{zk.connect}/b/offline"
        live = BrokerProcess(1, tmp / "live", live_zk, "live", extra_args=extra).start()
        offline = BrokerProcess(1, tmp / "offline", offline_zk, "offline", extra_args=extra).start()
        brokers = [live, offline]
        if not args.skip_backlog:
            topic = "backlog"
            with ClusterRegistry(live_zk) as reg:
                reg.create_topic(topic, args.partitions)
            time.sleep(1.0)
            fill(live.bootstrap, topic, args.messages, args.partitions)
            time.sleep(1.0)
            ratios, checked_ratios = [], []
            for rnd in range(args.rounds):
                raw = read_phase(live.bootstrap, topic, args.partitions, False, f"{label} round {rnd}")
                checked = None
                if args.checked_reader:
                    checked = read_phase(live.bootstrap, topic, args.partitions, True, f"{label} round {rnd}")
                settle()
                b0 = [proc_cpu(b) for b in brokers]
                config = {k: v for k, v in (("coalesce_bytes", args.coalesce_bytes),
                                            ("max_in_flight", args.max_in_flight)) if v is not None}
                if args.processes:
                    n, secs, cpus, (lb, ob), busy = mirror_processes(live, offline, live_zk, offline_zk, topic,
                                                                     args.partitions, args.streams, args.processes)
                    print(f"{label} round {rnd}: {args.processes} mirror processes {n:,} msgs {n / secs:,.0f} msg/s "
                          f"{cpus / n * 1e6:.2f} us CPU/msg -> {n / secs / raw:.2f}x of MessageSetConsumer (live "
                          f"broker {lb / n * 1e6:.2f}, offline broker {ob / n * 1e6:.2f} us CPU/msg); "
                          f"{machine_line(busy, secs, n)}", flush=True)
                else:
                    n, secs, committed, cpus, busy = mirror_copy(live, offline, live_zk, offline_zk, topic,
                                                                 args.partitions, args.streams, **config)
                    lb, ob = (proc_cpu(b) - c for b, c in zip(brokers, b0, strict=True))
                    print(f"{label} round {rnd}: mirror {n:,} msgs {n / secs:,.0f} msg/s {cpus / n * 1e6:.2f} us "
                          f"CPU/msg -> {n / secs / raw:.2f}x of MessageSetConsumer (live broker {lb / n * 1e6:.2f}, "
                          f"offline broker {ob / n * 1e6:.2f} us CPU/msg); all committed {committed:.2f} s after the "
                          f"first copied message ({n / committed:,.0f} msg/s); {machine_line(busy, secs, n)}",
                          flush=True)
                ratios.append(n / secs / raw)
                if checked:
                    checked_ratios.append(n / secs / checked)
            if len(ratios) > 1:  # one round's two rates are a few seconds each: one run varies a lot on a VM
                print(f"{label}: mirror / MessageSetConsumer over {len(ratios)} rounds: median "
                      f"{statistics.median(ratios):.2f}x, {min(ratios):.2f}-{max(ratios):.2f}x", flush=True)
            if checked_ratios:
                print(f"{label}: mirror / MessageSetConsumer with CRCs checked over {len(checked_ratios)} rounds: "
                      f"median {statistics.median(checked_ratios):.2f}x, {min(checked_ratios):.2f}-"
                      f"{max(checked_ratios):.2f}x", flush=True)
        if not args.skip_latency:
            r = latency(live, offline, live_zk, offline_zk, args.rate, args.seconds, args.partitions, args.streams)
            (ln, l50, l99), (on, o50, o99) = r["live"], r["offline"]
            print(f"{label}: latency at {args.rate} msg/s, {r['sent']:,} sent: live {ln:,} p50 {l50:.1f} ms "
                  f"p99 {l99:.1f} ms; offline {on:,} p50 {o50:.1f} ms p99 {o99:.1f} ms; mirror adds p50 "
                  f"{o50 - l50:.1f} ms p99 {o99 - l99:.1f} ms; mirror process CPU {r['mirror_cpu']:.0%} of a core",
                  flush=True)
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
