"""Soak (issue 36, not CI): the demo pipeline at a steady rate with a fault every minute, for --minutes.

The pieces `ferry demo` starts, as local processes: ZooKeeper (chroots /ferry/live and /ferry/offline), live
brokers 1 and 2 (every live topic and `_audit` on both: RF 2, min.insync.replicas 1), offline broker 101, the
mirror; plus a frontend process producing the demo's Avro events (bench/soak_producer.py: audited,
idempotent, acks=all, ``--rate`` events/s) and the warehouse load (`ferry load`, the hourly DAG's load task)
run again as soon as its last run ends. Event time runs 60x the clock: each real minute fills one event hour,
so a 30-minute soak closes 30 hours, every one of which the books must find complete.

Every minute one fault, in turn:
  broker      kill -9 live broker 1, restarted 8 s later
  mirror      kill -9 the mirror, restarted at once
  load        kill -9 the load run under way (its process group: Python and Spark's JVM), 10 s or more in
  zk-session  SIGSTOP live broker 2 past its ZooKeeper session (10 s) for 16 s, then SIGCONT: its session
              has expired, its leaderships moved; it must re-register and follow
  link        the datacenter link cut for 20 s: every packet from the mirror (uid 65534) to the live
              brokers dropped (iptables owner match), then healed
Live broker 2, ZooKeeper, the offline broker and the frontend are never restarted, so their memory is one
series each; broker 1 and the mirror are compared incarnation by incarnation, each load run by its peak.

At the end: production stopped, the mirror caught up, a last load, then
  - the books (live producers' counts + offline _audit: producer / mirror / warehouse tiers) for every
    (topic, event hour): complete, 0 missing, 0 duplicates;
  - the warehouse against the frontend's own acknowledgements (guid by guid): 0 lost, 0 duplicated;
  - memory flat: after --warmup, the mean RSS of the last window within 10% of the first window's.

Runs only as root (it re-executes itself under `unshare -n`: the soak gets its own loopback, so its iptables
rules and ports touch nothing else on the machine and vanish with it).

    sudo .venv/bin/python bench/soak.py [--minutes 30] [--rate 100] [--dir /tmp/ferry-soak] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from soak_parts import CuttableMirror, LinkCut, RepeatedLoad, RssSampler  # noqa: E402

from ferry.audit.live import read_live_counts  # noqa: E402
from ferry.audit.reader import read_audit_events  # noqa: E402
from ferry.audit.reconciler import reconcile  # noqa: E402
from ferry.demo_steps import DemoCluster, DemoProgress  # noqa: E402
from ferry.embedded import free_port  # noqa: E402
from ferry.loaders.session import build_session  # noqa: E402
from ferry.mirror.status import mirror_status  # noqa: E402

TOPICS = ("page_view", "click", "search")
HOUR_MS = 3_600_000
FAULTS = ("broker", "mirror", "load", "zk-session", "link")
GROWTH_LIMIT = 0.10


def reexec_in_private_netns() -> None:
    """Run the soak in a network namespace of its own (a fresh loopback; iptables rules local to it)."""
    if os.environ.get("FERRY_SOAK_NETNS") == "1":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)
        return
    if os.geteuid() != 0:
        sys.exit("soak: needs root (unshare -n and iptables for the link cuts)")
    env = dict(os.environ, FERRY_SOAK_NETNS="1")
    os.execvpe("unshare", ["unshare", "-n", "--", sys.executable, *sys.argv], env)


class Soak:
    """Sets the pipeline up, injects the faults, then checks the books, the warehouse and the memory."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root: Path = args.dir
        self.progress = DemoProgress()
        self.cluster = DemoCluster(self.root, self.progress, partitions=args.partitions)
        self.mirror: CuttableMirror | None = None
        self.load: RepeatedLoad | None = None
        self.frontend: subprocess.Popen | None = None
        self.faults: list[dict] = []
        self.t0 = 0.0

    def say(self, text: str) -> None:
        self.progress.say(text)

    # -- set up ---------------------------------------------------------------------------------------------
    def start(self) -> RssSampler:
        c = self.cluster
        c.start()
        c.create_topics(TOPICS)
        c.register_schemas(TOPICS)
        self.mirror = CuttableMirror(self.root, c.live_zk, c.offline_zk, free_port())
        self.mirror.start()
        self.say("mirror running as uid 65534")
        now_hour = int(time.time() * 1000) // HOUR_MS * HOUR_MS
        self.base_hour = now_hour - (self.args.minutes + 3) * HOUR_MS  # every event hour in the past
        self.t0 = time.time()
        self.acked_file = self.root / "acked.txt"
        self.frontend = subprocess.Popen(
            [sys.executable, str(HERE / "soak_producer.py"), "--zookeeper", c.live_zk, "--rate", str(self.args.rate),
             "--t0", str(self.t0), "--base-hour-ms", str(self.base_hour), "--acked", str(self.acked_file)],
            stdout=(self.root / "frontend.out").open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.load = RepeatedLoad(self.root, c.offline_zk, c.live_zk, TOPICS).start()
        brokers = {b.broker_id: b for b in c.brokers}
        assert c.zk is not None
        roles = {"zookeeper": lambda: c.zk.pid, "frontend": lambda: self.frontend.pid,
                 "mirror": lambda: self.mirror.pid, "load": lambda: self.load.pid}
        for bid, b in brokers.items():
            roles[f"broker-{bid}"] = (lambda b=b: b.pid if b.running else None)
        return RssSampler(roles, self.args.sample_s, jvm_roles=("zookeeper",)).start()

    # -- faults ---------------------------------------------------------------------------------------------
    def fault(self, kind: str) -> str:
        c = self.cluster
        b1, b2 = c.brokers[0], c.brokers[1]
        assert self.mirror is not None and self.load is not None
        if kind == "broker":
            b1.kill()
            time.sleep(8)
            b1.start(timeout=60)
            return "live broker 1 killed -9, restarted after 8 s"
        if kind == "mirror":
            self.mirror.kill()
            self.mirror.start()
            return "mirror killed -9, restarted"
        if kind == "load":
            return self.load.kill_running()
        if kind == "zk-session":
            b2.pause()
            time.sleep(16)
            b2.resume()
            b2.wait_registered(60)
            return "live broker 2 SIGSTOPped 16 s (session 10 s), resumed and registered again"
        if kind == "link":
            cut = LinkCut([b1.port, b2.port])
            cut.cut()
            try:
                time.sleep(20)
            finally:
                cut.heal()
            return "mirror -> live brokers cut for 20 s, healed"
        raise ValueError(kind)

    def run_faults(self) -> None:
        end = self.t0 + self.args.minutes * 60
        k = 0
        while True:
            at = self.t0 + 60 * (k + 1) + 15  # mid-minute: the minute's hour is half written
            if at + 30 > end:
                break
            time.sleep(max(at - time.time(), 0))
            self._check_alive()
            kind = FAULTS[k % len(FAULTS)]
            started = time.monotonic()
            detail = self.fault(kind)
            took = time.monotonic() - started
            self.faults.append({"minute": k + 1, "fault": kind, "detail": detail, "seconds": round(took, 1)})
            self.say(f"fault {k + 1} ({kind}): {detail} [{took:.0f}s]")
            k += 1
        time.sleep(max(end - time.time(), 0))

    def _check_alive(self) -> None:
        assert self.frontend is not None and self.frontend.poll() is None, "the frontend exited"
        for b in self.cluster.brokers:
            assert b.running, f"{b.name} is not running"

    # -- the end --------------------------------------------------------------------------------------------
    def finish(self) -> dict:
        assert self.frontend is not None and self.load is not None
        self.frontend.send_signal(signal.SIGTERM)
        self.frontend.wait(400)
        frontend = json.loads(Path(f"{self.acked_file}.json").read_text())
        self.say(f"frontend stopped: {frontend}")
        self._wait_mirrored()
        self.load.stop()
        self.say(f"{len(self.load.runs)} load runs during the soak; final load")
        for _ in range(3):
            run = self.load.run_once()
            books = self._books()
            if run.rc == 0 and all(h["complete"] for h in books):
                break
        return {"frontend": frontend, "books": books}

    def _wait_mirrored(self, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = mirror_status(self.cluster.live_zk, self.cluster.offline_zk, "ferry-mirror", include=".*")
            if status.total_lag == 0 and {r.topic for r in status.partitions} >= set(TOPICS):
                self.say("mirror caught up (lag 0)")
                return
            time.sleep(2)
        raise AssertionError(f"mirror still behind after {timeout:.0f}s")

    def _books(self) -> list[dict]:
        c = self.cluster
        live = read_live_counts([c.live_zk])
        assert not live.unreachable, live.unreachable
        report = reconcile(read_audit_events(c.offline_zk).events + live.events, since_ms=self.base_hour,
                           until_ms=self.base_hour + (self.args.minutes + 1) * HOUR_MS)
        return [{"topic": h.topic, "hour": h.hour_start, "produced": h.produced, "mirrored": h.mirrored,
                 "loaded": h.loaded, "missing": h.missing, "duplicates": h.duplicates, "complete": h.complete}
                for h in report.hours if h.topic in TOPICS]

    def warehouse_check(self) -> dict:
        """The warehouse's rows against the frontend's acknowledgements, guid by guid."""
        acked: dict[str, set[str]] = defaultdict(set)
        for line in self.acked_file.read_text().splitlines():
            topic, _, guid = line.split(" ")
            acked[topic].add(guid)
        spark = build_session(self.root / "warehouse-state")
        out: dict[str, dict] = {}
        for topic in TOPICS:
            rows = spark.sql(f"SELECT guid, count(*) AS n FROM ferry.{topic} GROUP BY guid").collect()
            stored = {r["guid"]: r["n"] for r in rows}
            out[topic] = {"acked": len(acked[topic]), "rows": sum(stored.values()),
                          "lost": len(acked[topic] - stored.keys()),
                          "duplicated": sum(n - 1 for n in stored.values() if n > 1),
                          "unacknowledged_rows": len(stored.keys() - acked[topic])}
        spark.stop()
        return out


def _windows(series: list[tuple[float, int, int]], warmup: float, window: float) -> dict:
    """First vs last window (after warm-up) of one process's samples: means in MB, growth, flat."""
    late = [(t, kb) for t, _, kb in series if t >= warmup]
    end = late[-1][0] if late else 0
    first = [kb for t, kb in late if t < warmup + window]
    last = [kb for t, kb in late if t > end - window]
    if not first or not last:
        return {"judged": False, "why": "too few samples"}
    a, b = statistics.mean(first) / 1024, statistics.mean(last) / 1024
    return {"first_window_mb": round(a, 1), "last_window_mb": round(b, 1), "growth": round(b / a - 1, 3),
            "judged": True, "flat": b <= a * (1 + GROWTH_LIMIT)}


def memory_verdict(samples: list[tuple[float, str, int, int]], t_start: float, warmup: float,
                   window: float, heap: list[tuple[float, str, int, int]] = ()) -> dict[str, dict]:
    """Per role: one series (never restarted) -> first vs last window after warm-up; several incarnations ->
    each incarnation's peak in its first 60 s, first vs last; loads -> each run's peak (reported). A JVM
    (ZooKeeper) is judged by its live heap after a full collection; its RSS is reported beside it."""
    by_role: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
    for t, role, pid, kb in samples:
        by_role[role].append((t - t_start, pid, kb))
    heap_by_role: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
    for t, role, pid, kb in heap:
        heap_by_role[role].append((t - t_start, pid, kb))
    out: dict[str, dict] = {}
    for role, series in sorted(heap_by_role.items()):
        rss = _windows(by_role.pop(role, []), warmup, window)
        out[role] = {**_windows(series, warmup, window), "measure": "live heap after a full GC (jcmd)",
                     "rss": {k: v for k, v in rss.items() if k.endswith("_mb") or k == "growth"}}
    for role, series in sorted(by_role.items()):
        pids = list(dict.fromkeys(p for _, p, _ in series))
        if role == "load":
            peaks = [max(kb for _, p, kb in series if p == pid) // 1024 for pid in pids]
            out[role] = {"runs": len(peaks), "peak_mb_first": peaks[:3], "peak_mb_last": peaks[-3:],
                         "judged": False}
            continue
        if len(pids) == 1:
            out[role] = _windows(series, warmup, window)
            continue
        peaks = []
        for pid in pids:
            own = [(t, kb) for t, p, kb in series if p == pid]
            born = own[0][0]
            peaks.append(max(kb for t, kb in own if t - born <= 60) / 1024)
        a, b = peaks[0], peaks[-1]
        out[role] = {"incarnations": len(pids), "first_60s_peak_mb": [round(x, 1) for x in peaks],
                     "growth": round(b / a - 1, 3), "judged": True, "flat": b <= a * (1 + GROWTH_LIMIT)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=int, default=30, help="how long the faults go on (default 30)")
    p.add_argument("--rate", type=float, default=100.0, help="frontend events per second (default 100)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--dir", type=Path, default=Path("/tmp/ferry-soak"), help="everything goes here (wiped first)")
    p.add_argument("--warmup", type=float, default=120.0, help="seconds of memory samples ignored (default 120)")
    p.add_argument("--sample-s", type=float, default=5.0)
    p.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = p.parse_args()
    if args.minutes < 3:
        p.error("--minutes must be at least 3")
    reexec_in_private_netns()
    args.dir = args.dir.resolve()
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    os.chdir(args.dir)
    soak = Soak(args)
    wall0 = time.time()
    ok = False
    with soak.cluster:
        try:
            sampler = soak.start()
            t_start = time.monotonic()
            soak.say(f"soak: {args.minutes} min, {args.rate:g} events/s, a fault every minute ({', '.join(FAULTS)})")
            soak.run_faults()
            sampler.stop()
            end = soak.finish()
            warehouse = soak.warehouse_check()
            span = time.monotonic() - t_start
            window = min(300.0, max((span - args.warmup) / 3, 60.0))
            memory = memory_verdict(sampler.samples, t_start, args.warmup, window, sampler.heap)
            (args.dir / "memory-samples.json").write_text(json.dumps(
                {"t_start": t_start, "rss_kb": sampler.samples, "live_heap_kb": sampler.heap}))
        finally:
            if soak.load is not None:
                soak.load.stop(60)
            if soak.frontend is not None and soak.frontend.poll() is None:
                soak.frontend.kill()
            if soak.mirror is not None:
                soak.mirror.stop()
    books = end["books"]
    incomplete = [h for h in books if not h["complete"] or h["missing"] or h["duplicates"]]
    lost = sum(w["lost"] for w in warehouse.values())
    dups = sum(w["duplicated"] for w in warehouse.values())
    hours = sorted({h["hour"] for h in books})
    not_flat = [r for r, m in memory.items() if m.get("judged") and not m["flat"]]
    ok = bool(books) and not incomplete and lost == 0 and dups == 0 and not not_flat \
        and end["frontend"]["failed"] == 0
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(wall0)), "minutes": args.minutes,
              "rate": args.rate, "wall_s": round(time.time() - wall0), "machine": f"{os.cpu_count()} cores, "
              f"{platform.machine()}, load average at the end {os.getloadavg()[0]:.1f}",
              "faults": soak.faults, "frontend": end["frontend"], "event_hours": len(hours),
              "topic_hours": len(books), "incomplete": incomplete, "warehouse": warehouse,
              "memory": memory, "load_runs": len(soak.load.runs) if soak.load else 0,
              "load_runs_killed": sum(r.killed for r in soak.load.runs) if soak.load else 0, "ok": ok}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    (args.dir / "soak-result.json").write_text(json.dumps(result, indent=2))
    print(f"soak {'PASSED' if ok else 'FAILED'}: {len(hours)} event hours x {len(TOPICS)} topics, "
          f"{len(incomplete)} incomplete; warehouse lost {lost}, duplicated {dups}; memory not flat: "
          f"{', '.join(not_flat) or 'none'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
