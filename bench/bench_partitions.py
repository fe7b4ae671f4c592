"""Many partitions on one broker (issue 20): produce throughput over 1 / 100 / 1000 partitions, and a broker
holding 10,000 partitions (start-up time, memory, serving).

Produce rows: ZooKeeper + one `ferry broker` (ferry.embedded), one topic per row with P partitions all led by
that broker, then N 200-byte messages in sets of 50 sent by ferry's MessageSetProducer (128 requests in
flight), partition after partition round robin. Leader lookups and connections happen before the clock
starts. Per row: msg/s, the broker's CPU per message (user + system, µs) and, over the timed part, what the
kernel did for the broker: page faults (minor/major, /proc/PID/stat), context switches, open files and
memory maps at the end, RSS. ``--strace`` adds a second pass of the biggest row under ``strace -c -f``
(syscall counts; slow, not timed); ``--profile`` a py-spy pass (bench/pyspy_profile.py).

    .venv/bin/python bench/bench_partitions.py                       # 1, 100, 1000 partitions, 1M messages
    .venv/bin/python bench/bench_partitions.py --partitions 1,1000 --messages 200000 --profile
    .venv/bin/python bench/bench_partitions.py --start 10000         # the 10,000-partition broker only

The 10,000-partition part (``--start N``): topics of 1,000 partitions each up to N, all on the broker; times
until the broker leads every partition (its logs created), produces one set to every partition, restarts the
broker (SIGTERM, then start: recovery from the checkpoints), times the start until it serves every partition
again, and records the broker's RSS, open files and maps after each step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:  # after site-packages: an installed ferry (bench/on_wheel.py) stays the one
    sys.path.append(str(HERE.parent))

from common import MESSAGE_SIZE, machine, payloads  # noqa: E402

from ferry.client.message_set_producer import MessageSetProducer  # noqa: E402
from ferry.client.wire_client import WireClient  # noqa: E402
from ferry.embedded import BrokerProcess, ZooKeeperServer  # noqa: E402
from ferry.wire.record.message_set_builder import MessageSetBuilder  # noqa: E402
from ferry.zk.cluster_registry import ClusterRegistry  # noqa: E402

BATCH = 50
TICK = os.sysconf("SC_CLK_TCK")


def proc_stats(pid: int) -> dict:
    """What the kernel says about one process now: CPU, faults, switches, files, maps, RSS."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    # fields[0] is the state (field 3); minflt is field 10, majflt 12, utime 14, stime 15
    out = {"minflt": int(fields[7]), "majflt": int(fields[9]),
           "utime": int(fields[11]) / TICK, "stime": int(fields[12]) / TICK}
    for line in open(f"/proc/{pid}/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmSize"):
            out[key] = int(value.split()[0]) * 1024
        elif key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            out[key] = int(value)
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    with open(f"/proc/{pid}/maps") as f:
        out["maps"] = sum(1 for _ in f)
    return out


def delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in ("minflt", "majflt", "utime", "stime", "voluntary_ctxt_switches",
                                     "nonvoluntary_ctxt_switches")}


class Cluster:
    """ZooKeeper and one broker in a temp dir, stopped at exit."""

    def __init__(self, root: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.root = root
        self.zk = ZooKeeperServer(data_dir=root / "zk")
        self.zk.start()
        self.chroot = f"{self.zk.connect}/bench"
        self.extra_args = extra_args
        self.broker = BrokerProcess(1, root / "b1" / "data", self.chroot, "live", extra_args=extra_args)
        self.broker.start(timeout=120)

    @property
    def pid(self) -> int:
        assert self.broker.pid is not None
        return self.broker.pid

    def restart(self) -> float:
        """Stop (SIGTERM) and start again; seconds from the new process to the broker registered."""
        self.broker.stop(timeout=120)
        self.broker = BrokerProcess(1, self.root / "b1" / "data", self.chroot, "live", port=self.broker.port,
                                    extra_args=self.extra_args)
        t0 = time.monotonic()
        self.broker.start(timeout=300)
        return time.monotonic() - t0

    def create_topic(self, name: str, partitions: int) -> None:
        with ClusterRegistry(self.chroot) as reg:
            reg.create_topic_with_assignment(name, {p: [1] for p in range(partitions)})

    def stop(self) -> None:
        self.broker.stop(timeout=120)
        self.zk.stop()


def wait_led(bootstrap: str, topics: dict[str, int], timeout_s: float) -> float:
    """Seconds until Metadata names a leader for every partition of ``topics`` (name -> partitions)."""
    t0 = time.monotonic()
    client = WireClient(bootstrap, client_id="bench-partitions", timeout_s=60)
    try:
        while True:
            md = client.refresh_metadata(list(topics))
            ok = all(t in md.topics and md.topics[t].error_code == 0
                     and sum(1 for p in md.topics[t].partitions if p.leader >= 0) == n
                     for t, n in topics.items())
            if ok:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"partitions not led after {timeout_s}s")
            time.sleep(0.2)
    finally:
        client.close()


def produce_row(cluster: Cluster, partitions: int, messages: int, profile: bool) -> dict:
    topic = f"p{partitions}-{int(time.time() * 1000) % 100000}"
    cluster.create_topic(topic, partitions)
    bootstrap = cluster.broker.bootstrap
    wait_led(bootstrap, {topic: partitions}, 120)
    builder = MessageSetBuilder(MESSAGE_SIZE)
    values = payloads()
    sets = [builder.build(values[i:i + BATCH]) for i in range(0, len(values) - BATCH + 1, BATCH)]
    p = MessageSetProducer(bootstrap, acks=1, max_in_flight=128, client_id="bench-partitions")
    for part in range(partitions):
        p.connect(topic, part)
    spy = None
    if profile:
        from pyspy_profile import PySpy

        spy = PySpy(cluster.pid, cluster.root / f"pyspy-{partitions}.txt").start()
        time.sleep(1.0)
    n_sets = messages // BATCH
    before = proc_stats(cluster.pid)
    t0 = time.perf_counter()
    send = p.send
    nsets = len(sets)
    for i in range(n_sets):
        send(topic, i % partitions, sets[i % nsets])
    p.flush()
    seconds = time.perf_counter() - t0
    after = proc_stats(cluster.pid)
    p.close()
    d = delta(before, after)
    sent = n_sets * BATCH
    row = {"partitions": partitions, "messages": sent, "seconds": round(seconds, 3),
           "msgs_per_s": round(sent / seconds), "broker_us_per_msg": round((d["utime"] + d["stime"]) / sent * 1e6, 2),
           "broker_user_s": round(d["utime"], 2), "broker_sys_s": round(d["stime"], 2),
           "minflt": d["minflt"], "majflt": d["majflt"],
           "vol_cs": d["voluntary_ctxt_switches"], "invol_cs": d["nonvoluntary_ctxt_switches"],
           "fds": after["fds"], "maps": after["maps"], "rss_mb": round(after["VmRSS"] / 2**20, 1),
           "vsz_mb": round(after["VmSize"] / 2**20, 1)}
    if spy is not None:
        row["pyspy"] = spy.stop()
    return row


def strace_pass(cluster: Cluster, workload: Callable[[], object]) -> str:
    """Syscall counts of the broker (all threads) while ``workload`` runs against it."""
    if shutil.which("strace") is None:
        return "strace not installed"
    out = cluster.root / "strace.txt"
    tracer = subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(cluster.pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    try:
        workload()
    finally:
        tracer.send_signal(2)
        tracer.wait(timeout=60)
    return out.read_text() if out.exists() else "no strace output"


def start_test(root: Path, total: int, per_topic: int = 1000) -> dict:
    """A broker with ``total`` partitions: create, serve, produce to each, restart; times and memory."""
    cluster = Cluster(root)
    out: dict = {"partitions": total}
    try:
        out["rss_empty_mb"] = round(proc_stats(cluster.pid)["VmRSS"] / 2**20, 1)
        topics = {f"many-{i}": min(per_topic, total - i * per_topic) for i in range(-(-total // per_topic))}
        t0 = time.monotonic()
        for name, n in topics.items():
            cluster.create_topic(name, n)
        out["create_s"] = round(time.monotonic() - t0, 1)
        out["led_after_create_s"] = round(time.monotonic() - t0 - out["create_s"]
                                          + wait_led(cluster.broker.bootstrap, topics, 600), 1)
        st = proc_stats(cluster.pid)
        out["led_after_create_cpu_s"] = round(st["utime"] + st["stime"], 1)  # since the broker started
        out["after_create"] = {"rss_mb": round(st["VmRSS"] / 2**20, 1), "fds": st["fds"], "maps": st["maps"]}
        builder = MessageSetBuilder(MESSAGE_SIZE)
        one_set = builder.build(payloads(count=BATCH))
        p = MessageSetProducer(cluster.broker.bootstrap, acks=1, max_in_flight=128, client_id="bench-many")
        t0 = time.monotonic()
        for name, n in topics.items():
            for part in range(n):
                p.send(name, part, one_set)
        p.flush()
        p.close()
        out["produce_one_set_each_s"] = round(time.monotonic() - t0, 1)
        time.sleep(1.0)  # flushes
        st = proc_stats(cluster.pid)
        out["after_produce"] = {"rss_mb": round(st["VmRSS"] / 2**20, 1), "fds": st["fds"], "maps": st["maps"]}
        registered = cluster.restart()
        led = wait_led(cluster.broker.bootstrap, topics, 600)
        out["restart_registered_s"] = round(registered, 1)
        out["restart_serving_s"] = round(registered + led, 1)
        st = proc_stats(cluster.pid)
        # CPU is what a busy machine does not distort: the broker's user + system seconds until it served all
        out["restart_serving_cpu_s"] = round(st["utime"] + st["stime"], 1)
        out["load_average"] = os.getloadavg()
        out["after_restart"] = {"rss_mb": round(st["VmRSS"] / 2**20, 1), "fds": st["fds"], "maps": st["maps"]}
        # it serves: a fetch-free check, one more set to the last partition of every topic
        p = MessageSetProducer(cluster.broker.bootstrap, acks=1, client_id="bench-many")
        for name, n in topics.items():
            p.send(name, n - 1, one_set)
        p.flush()
        out["offsets_after_restart"] = {f"{t}-{n - 1}": p.last_offsets[(t, n - 1)] for t, n in list(topics.items())[:2]}
        p.close()
        st = proc_stats(cluster.pid)
        out["after_restart_produce"] = {"rss_mb": round(st["VmRSS"] / 2**20, 1), "fds": st["fds"], "maps": st["maps"]}
    finally:
        cluster.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="1,100,1000", help="comma-separated partition counts (produce rows)")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--profile", action="store_true", help="py-spy on the broker during each row")
    ap.add_argument("--strace", action="store_true", help="syscall counts of the largest row (second pass)")
    ap.add_argument("--start", type=int, default=0, help="only the N-partition start-up test (e.g. 10000)")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    m = machine()
    print(f"machine: {m['nproc']} cpus {m['cpu_model']}, {m['ram_gb']} GB, Linux {m['kernel']}, Python "
          f"{m['python']}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.node()}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="ferry-bench-parts-"))
    results: dict = {"machine": m, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        if args.start:
            r = start_test(root, args.start)
            results["start"] = r
            print(json.dumps(r, indent=1))
            return
        cluster = Cluster(root)
        rows = []
        try:
            print("| partitions | msg/s | broker µs/msg | user s | sys s | minor faults | major | vol cs | "
                  "invol cs | fds | maps | RSS MB |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for n in (int(x) for x in args.partitions.split(",")):
                r = produce_row(cluster, n, args.messages, args.profile)
                rows.append(r)
                print(f"| {n} | {r['msgs_per_s']:,} | {r['broker_us_per_msg']} | {r['broker_user_s']} | "
                      f"{r['broker_sys_s']} | {r['minflt']:,} | {r['majflt']} | {r['vol_cs']:,} | {r['invol_cs']:,} | "
                      f"{r['fds']} | {r['maps']} | {r['rss_mb']} |", flush=True)
            base = rows[0]["msgs_per_s"]
            for r in rows[1:]:
                print(f"{r['partitions']} partitions: {r['msgs_per_s'] / base:.2f}x of {rows[0]['partitions']}")
            for r in rows:
                if "pyspy" in r and r["pyspy"]:
                    print(f"py-spy {r['partitions']} partitions: {json.dumps(r['pyspy'], indent=1)}")
            if args.strace:
                biggest = max(int(x) for x in args.partitions.split(","))
                results["strace"] = strace_pass(
                    cluster, lambda: produce_row(cluster, biggest, min(args.messages, 200_000), False))
                print(results["strace"])
        finally:
            cluster.stop()
        results["rows"] = rows
    finally:
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
