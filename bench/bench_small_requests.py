"""One-message produce requests (issue 20, goal 3): the broker's CPU per Produce request when every request
carries a single 200-byte message.

ZooKeeper + one `ferry broker` (ferry.embedded), one topic of one partition, then N requests of one message
each sent by ferry's MessageSetProducer (128 in flight, acks 1 by default). The figure is the broker's CPU
per request: user + system time of the broker process from /proc over the timed part, not wall time (the
machine is shared). ``--rounds`` repeats the timed part on the same broker (medians are reported);
``--profile`` adds a py-spy pass (bench/pyspy_profile.py), ``--strace`` a pass under ``strace -c -f``
(syscall counts per request; slow, not timed).

    .venv/bin/python bench/bench_small_requests.py --requests 200000 --rounds 3
    .venv/bin/python bench/bench_small_requests.py --requests 100000 --profile --strace
    # brokers of two checkouts side by side, 8 alternating chunks of 20,000 requests each (a checkout's ferry/
    # folder needs links to its package folders, as bench/ab_mirror.py explains)
    .venv/bin/python bench/bench_small_requests.py --compare /tmp/before /tmp/after --requests 20000 --rounds 8
    # and one more broker of the last checkout with the authorizer on (ACLs, docs/acls.md; the producer a super user)
    .venv/bin/python bench/bench_small_requests.py --compare /tmp/before /tmp/after --authorizer-arm --rounds 8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.append(str(HERE.parent))

from bench_partitions import Cluster, delta, proc_stats, strace_pass, wait_led  # noqa: E402
from common import MESSAGE_SIZE, payloads  # noqa: E402

from ferry.client.message_set_producer import MessageSetProducer  # noqa: E402
from ferry.wire.record.message_set_builder import MessageSetBuilder  # noqa: E402


def proc_io(pid: int) -> dict[str, int]:
    """The kernel's I/O counters of a process (syscr / syscw: read- and write-class syscalls)."""
    out = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = int(value)
    return out


def idle_cpu_per_s(pid: int, seconds: float = 3.0) -> float:
    """CPU seconds per second the broker uses with no request arriving (flusher, ZooKeeper pings ...)."""
    a = proc_stats(pid)
    t0 = time.perf_counter()
    time.sleep(seconds)
    b = proc_stats(pid)
    return (b["utime"] + b["stime"] - a["utime"] - a["stime"]) / (time.perf_counter() - t0)


def timed_pass(cluster: Cluster, topic: str, requests: int, acks: int, profile: Path | None = None,
               idle_s: float = 3.0) -> dict:
    """Send ``requests`` one-message sets; the broker's CPU per request over the timed part."""
    builder = MessageSetBuilder(MESSAGE_SIZE)
    sets = [builder.build([v]) for v in payloads(count=1024)]
    p = MessageSetProducer(cluster.broker.bootstrap, acks=acks, max_in_flight=128, client_id="bench-small")
    p.connect(topic, 0)
    for s in sets[:64]:  # warm: connection, templates, caches
        p.send(topic, 0, s)
    p.flush()
    spy = None
    if profile is not None:
        from pyspy_profile import PySpy

        spy = PySpy(cluster.pid, profile).start()
        time.sleep(1.0)
    idle = idle_cpu_per_s(cluster.pid, idle_s)
    before = proc_stats(cluster.pid)
    io_before = proc_io(cluster.pid)
    t0 = time.perf_counter()
    send = p.send
    n = len(sets)
    for i in range(requests):
        send(topic, 0, sets[i % n])
    p.flush()
    seconds = time.perf_counter() - t0
    after = proc_stats(cluster.pid)
    io_after = proc_io(cluster.pid)
    p.close()
    d = delta(before, after)
    cpu = d["utime"] + d["stime"]
    row = {"requests": requests, "acks": acks, "seconds": round(seconds, 3),
           "requests_per_s": round(requests / seconds),
           "broker_us_per_request": round(cpu / requests * 1e6, 2),
           # the same less what the broker burns idle (its threads' timers) over as many seconds: a slow
           # round (a busy machine) otherwise looks costlier per request
           "net_us_per_request": round(max(cpu - idle * seconds, 0.0) / requests * 1e6, 2),
           "idle_cpu_ms_per_s": round(idle * 1e3, 2),
           "broker_user_s": round(d["utime"], 2), "broker_sys_s": round(d["stime"], 2),
           "vol_cs": d["voluntary_ctxt_switches"], "invol_cs": d["nonvoluntary_ctxt_switches"],
           # write-class syscalls per request (pwritev, write; not socket sends), from /proc/PID/io
           "syscw_per_request": round((io_after["syscw"] - io_before["syscw"]) / requests, 3)}
    if spy is not None:
        row["pyspy"] = spy.stop()
    return row


AUTHORIZER_ARGS = ("--override", "authorizer.class.name=ferry", "--override", "super.users=User:ANONYMOUS")


def compare(checkouts: list[str], requests: int, chunks: int, acks: int, authorizer_arm: bool = False) -> dict:
    """Brokers of several checkouts side by side (each its own ZooKeeper and broker, the checkout first on the
    broker's PYTHONPATH), fed in alternating chunks of ``requests`` so that the machine's load drifts over all
    of them alike; the CPU per request of each over all its chunks. ``authorizer_arm``: one more broker of the
    last checkout, with the authorizer on."""
    arms = [(path, path, ()) for path in checkouts]
    if authorizer_arm:
        arms.append((checkouts[-1] + " (authorizer on)", checkouts[-1], AUTHORIZER_ARGS))
    checkouts = [label for label, _, _ in arms]
    clusters = []
    saved = os.environ.get("PYTHONPATH")
    # `python -m` puts the working directory first on the broker's path: from inside a checkout that checkout's
    # ferry/ would win over PYTHONPATH (and the editable install maps the rest to it), whatever we ask for.
    os.chdir(tempfile.gettempdir())
    try:
        for _label, path, extra in arms:
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (path, saved) if p)
            c = Cluster(Path(tempfile.mkdtemp(prefix="ferry-bench-small-")), extra)
            clusters.append(c)
            c.create_topic("small", 1)
            wait_led(c.broker.bootstrap, {"small": 1}, 120)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    totals = {path: {"requests": 0, "cpu": 0.0, "net": 0.0, "seconds": 0.0} for path in checkouts}
    try:
        for i in range(chunks):
            order = list(zip(checkouts, clusters, strict=True))
            if i % 2:
                order.reverse()
            for path, c in order:
                row = timed_pass(c, "small", requests, acks, idle_s=1.0)
                t = totals[path]
                t["requests"] += requests
                t["cpu"] += row["broker_us_per_request"] * requests / 1e6
                t["net"] += row["net_us_per_request"] * requests / 1e6
                t["seconds"] += row["seconds"]
                print(f"chunk {i + 1} {path}: {row['broker_us_per_request']:.2f} µs/request "
                      f"(net {row['net_us_per_request']:.2f}, {row['requests_per_s']} requests/s)", flush=True)
    finally:
        for c in clusters:
            c.stop()
            shutil.rmtree(c.root, ignore_errors=True)
    out = {}
    for path, t in totals.items():
        out[path] = {"requests": t["requests"], "us_per_request": round(t["cpu"] / t["requests"] * 1e6, 2),
                     "net_us_per_request": round(t["net"] / t["requests"] * 1e6, 2),
                     "requests_per_s": round(t["requests"] / t["seconds"])}
        print(f"{path}: {json.dumps(out[path])}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--acks", type=int, default=1, choices=(0, 1, -1))
    ap.add_argument("--profile", action="store_true", help="py-spy on the broker during one more pass")
    ap.add_argument("--strace", action="store_true", help="syscall counts during one more pass")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--compare", nargs="+", metavar="CHECKOUT",
                    help="brokers of these checkouts side by side, in alternating chunks of --requests "
                         "(--rounds chunks each)")
    ap.add_argument("--authorizer-arm", action="store_true",
                    help="with --compare: one more broker of the last checkout with the authorizer on")
    args = ap.parse_args()
    if args.compare:
        out = compare(args.compare, args.requests, args.rounds, args.acks, args.authorizer_arm)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        return
    root = Path(tempfile.mkdtemp(prefix="ferry-bench-small-"))
    cluster = Cluster(root)
    out: dict = {"rounds": []}
    try:
        topic = "small"
        cluster.create_topic(topic, 1)
        wait_led(cluster.broker.bootstrap, {topic: 1}, 120)
        for r in range(args.rounds):
            row = timed_pass(cluster, topic, args.requests, args.acks)
            print(f"round {r + 1}: {json.dumps(row)}", flush=True)
            out["rounds"].append(row)
        for field in ("broker_us_per_request", "net_us_per_request"):
            us = [row[field] for row in out["rounds"]]
            if us:
                out[f"median_{field}"] = statistics.median(us)
                print(f"{field}: median {statistics.median(us):.2f} µs (rounds {', '.join(f'{u:.2f}' for u in us)})",
                      flush=True)
        if args.profile:
            row = timed_pass(cluster, topic, args.requests, args.acks, profile=root / "pyspy.txt")
            out["profile"] = row
            print(json.dumps(row.get("pyspy"), indent=1), flush=True)
        if args.strace:
            text = strace_pass(cluster, lambda: timed_pass(cluster, topic, args.requests, args.acks))
            out["strace"] = text
            print(text, flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
