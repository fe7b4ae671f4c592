"""Consumer groups at scale (issue 20 goal 5): the paper's ZooKeeper groups (Algorithm 1) with 1,000
partitions and 50 real ConsumerConnector members joining, leaving, being killed and churning.

    .venv/bin/python bench/bench_groups.py [--partitions 1000] [--members 50] [--workers 5] [--victims 5]
        [--leaves 10] [--churn 10] [--session-timeout 3] [--json out.json]

One real ZooKeeper (ferry.embedded, tickTime 500 ms so that short sessions are allowed). No broker: the
topic is registered in ZooKeeper the way the cluster registry does it, and a connector with no broker
registered keeps its fetcher idle, so the run measures the coordination alone (a rebalance never talks to
a broker). Members are threads in a few worker processes (``--workers``), plus one process per member to
be killed (``--victims``: SIGKILL, so ZooKeeper drops them when their session expires).

Ownership is checked all through the run, not only at the end:
- every PartitionTopicInfo a member creates (one per partition per ownership period: the fetcher and the
  commits go by it) records when it was made (after the member's claims succeeded) and when it was
  invalidated (before the member deletes its owner node), on CLOCK_MONOTONIC, which all processes share.
  A partition is owned twice if two such intervals of different members overlap: the driver checks every
  interval of the run;
- each worker process repeatedly takes the partitions its members hold as valid, reads those owner
  znodes, and checks the same info objects are still valid afterwards: a partition a member held
  throughout the read must have its owner znode created by that member's session;
- the driver sweeps every owner znode and the member list (an owner that is no member is counted), and
  confirms each settled state there: every partition owned once, by Algorithm 1's member for it.

Settle time = from the driver's command (join, leave, SIGKILL) to the moment the last member of the new
split made its ownership valid (its PartitionTopicInfo), once the owners are exactly Algorithm 1's split of
the current members. ZooKeeper operations are the connectors' requests (counted in kazoo's request path per
client; pings and the checkers' reads are not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUP = "scale"
TOPIC = "events"


# -- worker process: hosts ConsumerConnector members, answers commands on stdin, checks ownership ---------
def _count_requests() -> None:
    """Count every request a kazoo client sends (per client object), by request type."""
    from kazoo.client import KazooClient

    original = KazooClient._call
    lock = threading.Lock()

    def counting_call(self, request, async_object):
        with lock:
            ops = self.__dict__.setdefault("_bench_ops", Counter())
            ops[type(request).__name__] += 1
        return original(self, request, async_object)

    KazooClient._call = counting_call


def _record_ownership(events: list, lock: threading.Lock) -> None:
    """Make every PartitionTopicInfo a connector creates report when it was made and invalidated."""
    from ferry.client import group_rebalance
    from ferry.client.partition_topic_info import PartitionTopicInfo

    class RecordedInfo(PartitionTopicInfo):
        __slots__ = ("idx", "dead")

        def __init__(self, topic, partition, stream, fetch_offset) -> None:
            self.dead = False
            # made by the member's rebalance thread, named after the member
            member = threading.current_thread().name.removeprefix("ferry-rebalance-")
            with lock:
                self.idx = len(events)
                events.append(("born", self.idx, member, partition, time.monotonic()))
            super().__init__(topic, partition, stream, fetch_offset)

        @property
        def valid(self) -> bool:
            return not self.dead

        @valid.setter
        def valid(self, value: bool) -> None:
            if not value and not self.dead:
                self.dead = True
                with lock:
                    events.append(("died", self.idx, time.monotonic()))

    group_rebalance.PartitionTopicInfo = RecordedInfo


class Worker:
    def __init__(self, zk: str, partitions: int, session_timeout: float, backoff: float | None) -> None:
        from ferry.zk import connect

        self.zk_connect = zk
        self.session_timeout = session_timeout
        self.backoff = backoff
        self.members: dict[str, object] = {}
        self.retired_ops: Counter = Counter()
        self.lock = threading.Lock()
        self.lock_events = threading.Lock()
        self.out_lock = threading.Lock()
        self.checker = connect(zk, timeout=10)
        self.connect_retries = 0
        self.checks = 0  # (member, partition) pairs proven held by that member's own znode
        self.sweeps = 0
        self.max_gap_s = 0.0
        self.violations: list[str] = []
        self.stop = threading.Event()
        self.events: list = []
        self.sent = 0
        _record_ownership(self.events, self.lock_events)
        threading.Thread(target=self._check_loop, daemon=True).start()

    def reply(self, msg: dict) -> None:
        with self.out_lock:
            sys.stdout.write(json.dumps(msg) + "\n")
            sys.stdout.flush()

    def join(self, cid: str) -> None:
        from ferry.client.consumer_connector import ConsumerConnector
        from ferry.zk.errors import RegistryError

        kw = {} if self.backoff is None else {"rebalance_backoff_s": self.backoff}
        for attempt in range(3):  # an overloaded ZooKeeper may not take a new session within 10 s
            try:
                c = ConsumerConnector(GROUP, self.zk_connect, consumer_id=cid,
                                      zk_session_timeout_s=self.session_timeout, auto_commit=False, **kw)
                break
            except RegistryError:
                if attempt == 2:
                    raise
                self.connect_retries += 1
        with self.lock:
            self.members[cid] = c
        c.create_message_streams({TOPIC: 1}, wait_s=0)

    def leave(self, cid: str) -> None:
        with self.lock:
            c = self.members[cid]
        c.shutdown()
        with self.lock:
            self.members.pop(cid, None)
            self.retired_ops.update(c._zk.__dict__.get("_bench_ops", Counter()))

    def new_events(self) -> list:
        with self.lock_events:
            out, self.sent = self.events[self.sent:], len(self.events)
        return out

    def stats(self) -> dict:
        with self.lock:
            ops = Counter(self.retired_ops)
            for c in self.members.values():
                ops.update(c._zk.__dict__.get("_bench_ops", Counter()))
            return {"ops": dict(ops), "checks": self.checks, "sweeps": self.sweeps, "max_gap_s": self.max_gap_s,
                    "violations": list(self.violations), "members": sorted(self.members),
                    "connect_retries": self.connect_retries}

    def _check_loop(self) -> None:
        last = time.monotonic()
        while not self.stop.is_set():
            try:
                self._check_once()
            except Exception as exc:  # a checker failure is reported, never hidden
                self.violations.append(f"checker error: {exc!r}")
            now = time.monotonic()
            self.max_gap_s = max(self.max_gap_s, now - last)
            self.sweeps += 1
            # at most a third of the time reading: the checks must not be what slows the group down
            self.stop.wait(max(0.3, 2 * (now - last)))
            last = time.monotonic()

    def _check_once(self) -> None:
        from kazoo.exceptions import NoNodeError

        from ferry.client import group_dirs as dirs

        held = []  # (member, session, key, info) valid now
        with self.lock:
            members = list(self.members.items())
        for cid, c in members:
            client_id = c._zk.client_id
            session = client_id[0] if client_id else None
            for key, info in c.ownership.owned_infos().items():
                if info.valid:
                    held.append((cid, session, key, info))
        reads = [self.checker.get_async(dirs.owner_path(GROUP, k[0], k[1])) for _, _, k, _ in held]
        seen: dict[tuple[str, int], str] = {}
        for (cid, session, key, info), read in zip(held, reads, strict=True):
            try:
                data, stat = read.get(timeout=30)
                owner, owner_session = data.decode(), stat.ephemeralOwner
            except NoNodeError:
                owner, owner_session = None, None
            if not info.valid:  # released while we looked: proves nothing either way
                continue
            self.checks += 1
            if owner != cid or owner_session != session:
                self.violations.append(f"{cid} holds {key} but its owner znode is {owner!r} (session "
                                       f"{owner_session}, member's {session})")
            if key in seen and seen[key] != cid:
                self.violations.append(f"{key} held by both {seen[key]} and {cid}")
            seen[key] = cid


def worker_main(zk: str, partitions: int, session_timeout: float, backoff: float | None) -> int:
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    _count_requests()
    if os.environ.get("BENCH_CLIENT_DIR"):  # measure another version of the client (a baseline)
        import ferry.client

        ferry.client.__path__ = [os.environ["BENCH_CLIENT_DIR"]]
    w = Worker(zk, partitions, session_timeout, backoff)

    def run(cmd: dict) -> None:
        try:
            if cmd["op"] == "join":
                w.join(cmd["id"])
            elif cmd["op"] == "leave":
                w.leave(cmd["id"])
            w.reply({"seq": cmd["seq"], "ok": True, "stats": w.stats() if cmd["op"] == "stats" else None,
                     "events": w.new_events() if cmd["op"] == "events" else None})
        except Exception as exc:
            w.reply({"seq": cmd["seq"], "ok": False, "error": repr(exc)})

    w.reply({"seq": 0, "ok": True, "pid": os.getpid()})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            with w.lock:
                cids = list(w.members)
            threads = [threading.Thread(target=w.leave, args=(c,)) for c in cids]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            w.stop.set()
            run({"op": "stats", "seq": cmd["seq"]})
            return 0
        threading.Thread(target=run, args=(cmd,), daemon=True).start()
    return 0


# -- driver ----------------------------------------------------------------------------------------------
class WorkerHandle:
    """A worker process and its command channel (one reply per command, matched by sequence number)."""

    def __init__(self, name: str, zk: str, args: argparse.Namespace, log_dir: Path) -> None:
        self.name = name
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--zookeeper", zk,
                "--partitions", str(args.partitions), "--session-timeout", str(args.session_timeout)]
        if args.backoff is not None:
            argv += ["--backoff", str(args.backoff)]
        self.stderr = open(log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed in close()
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True, bufsize=1, env=env)
        self.seq = 0
        self.replies: dict[int, dict] = {}
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.wait(0, 60)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            with self.cond:
                self.replies[msg["seq"]] = msg
                self.cond.notify_all()

    def send(self, op: str, cid: str | None = None) -> int:
        self.seq += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "id": cid, "seq": self.seq}) + "\n")
        self.proc.stdin.flush()
        return self.seq

    def wait(self, seq: int, timeout: float) -> dict:
        with self.cond:
            if not self.cond.wait_for(lambda: seq in self.replies, timeout):
                raise TimeoutError(f"worker {self.name}: no answer to command {seq} in {timeout:g}s")
            msg = self.replies.pop(seq)
        if not msg["ok"]:
            raise RuntimeError(f"worker {self.name}: {msg['error']}")
        return msg

    def call(self, op: str, cid: str | None = None, timeout: float = 60) -> dict:
        return self.wait(self.send(op, cid), timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.stderr.close()


class OwnerMonitor:
    """Sweeps the group's member list and every owner znode continuously (a thread of the driver)."""

    def __init__(self, zk: str, partitions: int) -> None:
        from ferry.zk import connect

        self.zk = connect(zk, timeout=10)
        self.partitions = list(range(partitions))
        self.orphans = 0  # sweeps that saw an owner that was no member before or after the sweep
        self.sweep_s: list[float] = []
        self.gone: dict[str, float] = {}  # member -> first sweep start that no longer saw it
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        known: set[str] = set()
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                ids1, owners, ids2 = self.read()
            except Exception as exc:  # a failed sweep is said, and the next one tries again
                print(f"owner sweep failed: {exc!r}", file=sys.stderr)
                self.stop.wait(1.0)
                continue
            t1 = time.monotonic()
            self.sweep_s.append(t1 - t0)
            if set(owners.values()) - set(ids1) - set(ids2):
                self.orphans += 1
            for m in known - set(ids2):
                self.gone.setdefault(m, t0)
            known = set(ids2)
            self.stop.wait(max(0.2, 2 * (t1 - t0)))  # reading at most a third of the time

    def read(self) -> tuple[list[str], dict[int, str], list[str]]:
        """Members, owners (partition -> member), members again."""
        from kazoo.exceptions import NoNodeError

        from ferry.client import group_dirs as dirs

        ids1 = sorted(self.zk.get_children(dirs.ids_dir(GROUP)))
        try:
            owned = self.zk.get_children(f"{dirs.owners_dir(GROUP)}/{TOPIC}")
        except NoNodeError:
            owned = []
        reads = [(int(p), self.zk.get_async(f"{dirs.owners_dir(GROUP)}/{TOPIC}/{p}")) for p in owned]
        owners: dict[int, str] = {}
        for p, r in reads:
            try:
                owners[p] = r.get(timeout=60)[0].decode()
            except NoNodeError:
                pass
        ids2 = sorted(self.zk.get_children(dirs.ids_dir(GROUP)))
        return ids1, owners, ids2

    def expected(self, members: list[str]) -> dict[int, str]:
        from ferry.client.range_assignor import assign_all

        return {p: c for c, ps in assign_all(self.partitions, members).items() for p in ps}


class Ledger:
    """Every ownership interval of the run (member, partition, made, invalidated), from the workers."""

    def __init__(self) -> None:
        self.iv: dict[tuple[str, int], list] = {}

    def add(self, worker: str, events: list) -> None:
        for e in events:
            if e[0] == "born":
                self.iv[(worker, e[1])] = [e[2], e[3], e[4], None]
            else:
                self.iv[(worker, e[1])][3] = e[2]

    def end_all(self, worker: str, t: float) -> None:
        """A killed process delivers nothing after its death."""
        for (w, _), v in self.iv.items():
            if w == worker and v[3] is None:
                v[3] = t

    def open_owners(self) -> dict[int, list[tuple[str, float]]]:
        out: dict[int, list[tuple[str, float]]] = {}
        for member, p, born, died in self.iv.values():
            if died is None:
                out.setdefault(p, []).append((member, born))
        return out

    def overlaps(self) -> list[str]:
        """Intervals of one partition that overlap in time: the partition was owned twice."""
        by_p: dict[int, list] = {}
        for member, p, born, died in self.iv.values():
            by_p.setdefault(p, []).append((born, float("inf") if died is None else died, member))
        out = []
        for p, ivs in sorted(by_p.items()):
            ivs.sort()
            end, holder = -1.0, None
            for born, died, member in ivs:
                if born < end:
                    out.append(f"partition {p}: {member} from {born:.3f} while {holder} until {end:.3f}")
                if died > end:
                    end, holder = died, member
        return out


def summarize(settles: list[float]) -> dict:
    if not settles:
        return {}
    return {"n": len(settles), "p50_s": round(statistics.median(settles), 3),
            "p90_s": round(sorted(settles)[max(0, int(len(settles) * 0.9 + 0.5) - 1)], 3),
            "max_s": round(max(settles), 3)}


class Simulation:
    def __init__(self, args: argparse.Namespace, zk: str, log_dir: Path, zk_pid: int | None = None) -> None:
        import psutil

        self.args = args
        self.monitor = OwnerMonitor(zk, args.partitions)
        self.workers = [WorkerHandle(f"w{i}", zk, args, log_dir) for i in range(args.workers)]
        self.victims = [WorkerHandle(f"v{i}", zk, args, log_dir) for i in range(args.victims)]
        self.home: dict[str, WorkerHandle] = {}
        self.members: list[str] = []
        self.dead_ops: Counter = Counter()
        self.results: dict[str, dict] = {}
        self.procs = [psutil.Process(w.proc.pid) for w in self.workers + self.victims]
        self.cpu_seen: dict[int, float] = {}
        self.zk_proc = psutil.Process(zk_pid) if zk_pid else None
        self.ledger = Ledger()
        self.znode_mismatches = 0  # settled by the members' ownership but not (yet) by the znodes

    def cpu_s(self) -> float:
        """User+sys CPU of every member process (a killed one counts with its last reading)."""
        for p in self.procs:
            try:
                t = p.cpu_times()
                self.cpu_seen[p.pid] = t.user + t.system
            except Exception:
                pass
        return sum(self.cpu_seen.values())

    def zk_cpu_s(self) -> float:
        if self.zk_proc is None:
            return 0.0
        t = self.zk_proc.cpu_times()
        return t.user + t.system

    def ops(self) -> Counter:
        total = Counter(self.dead_ops)
        for w in self.workers + self.victims:
            if w.proc.poll() is None:
                total.update(w.call("stats")["stats"]["ops"])
        return total

    def pull_events(self) -> None:
        for w in self.workers + self.victims:
            if w.proc.poll() is None:
                self.ledger.add(w.name, w.call("events")["events"])

    def wait_settled(self, since: float) -> tuple[float, dict[int, str]]:
        """When the members' valid ownership became exactly Algorithm 1's split of the current members,
        confirmed by the owner znodes."""
        want = self.monitor.expected(sorted(self.members))
        deadline = time.monotonic() + self.args.settle_timeout
        while time.monotonic() < deadline:
            self.pull_events()
            held = self.ledger.open_owners()
            if len(held) == len(want) and all(len(v) == 1 and v[0][0] == want[p] for p, v in held.items()):
                settled_at = max(since, *(v[0][1] for v in held.values()))
                ids1, owners, ids2 = self.monitor.read()
                if owners == want and ids1 == ids2 == sorted(self.members):
                    return settled_at, owners
                self.znode_mismatches += 1
            time.sleep(0.1)
        held = self.ledger.open_owners()
        raise TimeoutError(f"not settled in {self.args.settle_timeout:g}s: want {len(self.members)} members "
                           f"owning {len(want)} partitions; {len(held)} are held, by "
                           f"{len({m for v in held.values() for m, _ in v})} members")

    def owned_range(self, owners: dict[int, str]) -> tuple[int, int]:
        per = Counter(owners.values())
        counts = [per.get(m, 0) for m in self.members]
        return min(counts), max(counts)

    def scenario(self, name: str, steps) -> None:
        """Run ``steps`` (each: apply one change, return its start time), waiting for the settle after each."""
        settles, spreads, extra = [], [], []
        ops0, cpu0, zk0, t_start = self.ops(), self.cpu_s(), self.zk_cpu_s(), time.monotonic()
        for step in steps:
            since, after = step()
            t1, owners = self.wait_settled(since)
            settles.append(t1 - since)
            print(f"  {name} {len(settles)}: settled in {t1 - since:.2f}s with {len(self.members)} members",
                  file=sys.stderr, flush=True)
            spreads.append(self.owned_range(owners))
            if after is not None:
                seen = self.monitor.gone.get(after)
                if seen is not None:
                    extra.append(t1 - seen)
        ops = self.ops() - ops0
        n = len(settles)
        self.results[name] = {
            "rebalances": n, "settle": summarize(settles),
            "settle_after_expiry": summarize(extra) if extra else None,
            "zk_ops": sum(ops.values()), "zk_ops_per_rebalance": round(sum(ops.values()) / max(1, n)),
            "zk_ops_by_type": dict(ops.most_common()),
            "partitions_per_member_min": min(s[0] for s in spreads),
            "partitions_per_member_max": max(s[1] for s in spreads),
            "final_partitions_per_member": list(spreads[-1]),
            "members_after": len(self.members), "wall_s": round(time.monotonic() - t_start, 2),
            "member_cpu_s": round(self.cpu_s() - cpu0, 2), "zookeeper_cpu_s": round(self.zk_cpu_s() - zk0, 2),
            "load_avg_1m": os.getloadavg()[0],
        }
        print(f"{name}: {json.dumps(self.results[name])}", flush=True)

    def join_step(self, cid: str, w: WorkerHandle):
        def step():
            since = time.monotonic()
            w.call("join", cid)
            self.home[cid] = w
            self.members.append(cid)
            return since, None
        return step

    def leave_step(self, cid: str):
        def step():
            since = time.monotonic()
            self.members.remove(cid)
            self.home[cid].call("leave", cid, timeout=self.args.settle_timeout)
            return since, None
        return step

    def kill_step(self, w: WorkerHandle):
        def step():
            stats = w.call("stats")["stats"]
            self.cpu_s()
            (cid,) = stats["members"]
            self.dead_ops.update(stats["ops"])
            self.ledger.add(w.name, w.call("events")["events"])
            since = time.monotonic()
            os.kill(w.proc.pid, signal.SIGKILL)
            w.proc.wait(10)
            self.ledger.end_all(w.name, time.monotonic())
            self.members.remove(cid)
            return since, cid
        return step

    def churn_step(self, joins: list[tuple[str, WorkerHandle]], leaves: list[str]):
        """Joins and leaves ``churn_gap_s`` apart, without waiting for the group between them."""
        def step():
            pending = []
            since = time.monotonic()
            for i in range(max(len(joins), len(leaves))):
                if i < len(joins):
                    cid, w = joins[i]
                    pending.append((w, w.send("join", cid)))
                    self.home[cid] = w
                    self.members.append(cid)
                if i < len(leaves):
                    cid = leaves[i]
                    self.members.remove(cid)
                    pending.append((self.home[cid], self.home[cid].send("leave", cid)))
                since = time.monotonic()
                time.sleep(self.args.churn_gap_s)
            for w, seq in pending:
                w.wait(seq, self.args.settle_timeout)
            return since, None
        return step

    def run(self) -> dict:
        a = self.args
        names = [f"m{i:03d}" for i in range(a.members)]
        victim_slots = set(range(a.members // max(1, a.victims) - 1, a.members, a.members // max(1, a.victims))) \
            if a.victims else set()
        victims = iter(self.victims)
        homes = []
        for i, cid in enumerate(names):
            w = next(victims) if i in victim_slots else self.workers[i % len(self.workers)]
            homes.append((cid, w))
        self.scenario("join", [self.join_step(cid, w) for cid, w in homes])
        leavers = [cid for cid, w in homes if w in self.workers][:a.leaves]
        self.scenario("leave", [self.leave_step(cid) for cid in leavers])
        if self.victims:
            self.scenario("kill", [self.kill_step(w) for w in self.victims])
        if a.churn:
            new = [(f"n{i:03d}", self.workers[i % len(self.workers)]) for i in range(a.churn)]
            old = [m for m in self.members if m not in leavers][::-1][:a.churn]
            self.scenario("churn", [self.churn_step(new, old)])
        return self.results

    def finish(self) -> dict:
        checks = {"member_checks": 0, "checker_sweeps": 0, "checker_max_sweep_s": 0.0, "violations": []}
        self.pull_events()
        for w in self.workers:
            if w.proc.poll() is None:
                st = w.call("quit", timeout=120)["stats"]
                checks["member_checks"] += st["checks"]
                checks["checker_sweeps"] += st["sweeps"]
                checks["checker_max_sweep_s"] = round(max(checks["checker_max_sweep_s"], st["max_gap_s"]), 3)
                checks["violations"] += st["violations"]
                checks["connect_retries"] = checks.get("connect_retries", 0) + st["connect_retries"]
        overlaps = self.ledger.overlaps()
        checks["ownership_intervals"] = len(self.ledger.iv)
        checks["overlapping_intervals"] = len(overlaps)
        checks["violations"] += overlaps
        checks["settled_by_members_not_yet_by_znodes"] = self.znode_mismatches
        self.monitor.stop.set()
        self.monitor.thread.join(30)
        sweeps = sorted(self.monitor.sweep_s)
        checks["owner_sweeps"] = len(sweeps)
        checks["sweep_ms_p50"] = round(1000 * statistics.median(sweeps), 1) if sweeps else None
        checks["sweep_ms_max"] = round(1000 * sweeps[-1], 1) if sweeps else None
        checks["orphan_owner_sweeps"] = self.monitor.orphans
        checks["double_ownership"] = len(checks["violations"])
        for w in self.workers + self.victims:
            w.close()
        self.monitor.zk.stop()
        self.monitor.zk.close()
        return checks


def bench_zookeeper_class():
    from ferry.embedded import ZooKeeperServer

    class BenchZooKeeper(ZooKeeperServer):
        """ZooKeeper refuses a 61st connection from one address by default (maxClientCnxns=60): 50 members
        plus the checkers' clients all come from 127.0.0.1."""

        def write_config(self) -> Path:
            cfg = super().write_config()
            cfg.write_text(cfg.read_text() + "maxClientCnxns=0\n")
            return cfg

    return BenchZooKeeper


def register_topic(zk: str, partitions: int) -> None:
    from ferry.zk import TopicInfo, connect

    client = connect(zk, timeout=10)
    try:
        client.ensure_path("/brokers/topics")
        client.ensure_path("/brokers/ids")
        client.ensure_path(f"/consumers/{GROUP}/ids")
        info = TopicInfo.from_assignment(TOPIC, {p: (1,) for p in range(partitions)})
        client.create(f"/brokers/topics/{TOPIC}", info.encode())
    finally:
        client.stop()
        client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--workers", type=int, default=5, help="processes holding the members as threads")
    ap.add_argument("--victims", type=int, default=5, help="members in processes of their own, SIGKILLed")
    ap.add_argument("--leaves", type=int, default=10)
    ap.add_argument("--churn", type=int, default=10, help="joins and as many leaves, churn-gap apart")
    ap.add_argument("--churn-gap-s", type=float, default=0.3)
    ap.add_argument("--session-timeout", type=float, default=6.0)
    ap.add_argument("--backoff", type=float, default=None, help="rebalance_backoff_s (connector default if unset)")
    ap.add_argument("--settle-timeout", type=float, default=60.0)
    ap.add_argument("--zookeeper", help="use this ZooKeeper (host:port) instead of starting one")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (ZooKeeper, workers) when stopped
    if args.worker:
        return worker_main(args.zookeeper, args.partitions, args.session_timeout, args.backoff)
    sys.path.insert(0, str(ROOT))
    BenchZooKeeper = bench_zookeeper_class()  # noqa: N806 - a class
    tmp = Path(tempfile.mkdtemp(prefix="bench-groups-"))
    server = None
    try:
        if args.zookeeper:
            hosts = args.zookeeper
        else:
            server = BenchZooKeeper(data_dir=tmp / "zookeeper", tick_ms=500).start()
            hosts = server.connect
        zk = f"{hosts}/bench-groups-{os.getpid()}-{int(time.time())}"
        register_topic(zk, args.partitions)
        sim = Simulation(args, zk, tmp, server.proc.pid if server is not None else None)
        failure = None
        try:
            results = sim.run()
        except Exception as exc:
            failure = repr(exc)
            results = sim.results
        checks = sim.finish()
        out = {"partitions": args.partitions, "members": args.members, "workers": args.workers,
               "session_timeout_s": args.session_timeout, "scenarios": results, "checks": checks,
               "failure": failure}
        print(json.dumps(checks), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        if failure:
            print(f"FAILED: {failure} (worker logs in {tmp})", file=sys.stderr)
            return 1
        return 1 if checks["double_ownership"] else 0
    finally:
        if server is not None:
            server.stop()
        if os.environ.get("BENCH_KEEP") is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
