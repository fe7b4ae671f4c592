"""The soak's moving parts (bench/soak.py): the mirror it can cut off, the hourly load run again and again,
the link cut, and the memory sampler. Each is a small class with one duty; soak.py composes them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ferry.embedded import ManagedProcess, wait_for_port

NOBODY = 65534  # the mirror runs as this uid, so that iptables can cut its links and no one else's


def tree_rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants (a load is Python + Spark's JVM), in KiB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    break
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


def jvm_live_heap_kb(pid: int) -> int | None:
    """The heap a JVM holds after a full collection (`jcmd GC.run`, then the used figures of every heap
    space in `GC.heap_info`), in KiB: what a leak grows. A JVM's RSS is no such measure: it climbs towards
    -Xmx as the collector commits heap it had reserved, and stays there."""
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=30, check=True)
        out = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    used = 0
    for line in out.splitlines():
        words = line.replace(",", " ").split()
        if not words or words[0] in ("Metaspace", "class") or "used" not in words:
            continue
        figure = words[words.index("used") + 1]
        if figure.endswith("K"):
            used += int(figure[:-1])
    return used or None


class RssSampler:
    """Every ``interval`` seconds, the RSS of each role's current process tree: (t, role, pid, KiB); every
    ``heap_every`` seconds, the live heap of the roles that are JVMs (``jvm_roles``)."""

    def __init__(self, roles: dict[str, object], interval: float = 5.0, jvm_roles: tuple[str, ...] = (),
                 heap_every: float = 60.0) -> None:
        self.roles = roles  # role -> callable returning the current pid or None
        self.interval = interval
        self.jvm_roles = jvm_roles
        self.heap_every = heap_every
        self.samples: list[tuple[float, str, int, int]] = []
        self.heap: list[tuple[float, str, int, int]] = []
        self._next_heap = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            for role, pid_of in self.roles.items():
                pid = pid_of()
                if pid:
                    rss = tree_rss_kb(pid)
                    if rss:
                        self.samples.append((now, role, pid, rss))
            if now >= self._next_heap:
                self._next_heap = now + self.heap_every
                for role in self.jvm_roles:
                    pid = self.roles[role]()
                    used = jvm_live_heap_kb(pid) if pid else None
                    if used:
                        self.heap.append((time.monotonic(), role, pid, used))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class CuttableMirror:
    """`ferry mirror` run as uid NOBODY (so that a link cut can name its packets), restarted after a kill."""

    def __init__(self, root: Path, live_zk: str, offline_zk: str, metrics_port: int) -> None:
        self.root, self.live_zk, self.offline_zk, self.metrics_port = root, live_zk, offline_zk, metrics_port
        self.process: ManagedProcess | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.running else None

    def start(self) -> None:
        self.process = ManagedProcess("mirror", self.root / "mirror.out")
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", HOME="/tmp")
        self.process.spawn(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                            sys.executable, "-m", "ferry.cli", "mirror", "--source-zookeeper", self.live_zk,
                            "--target-zookeeper", self.offline_zk, "--include", ".*", "--streams", "2",
                            "--metrics-port", str(self.metrics_port), "--datacenter", "offline",
                            "--commit-interval", "1"], env=env)
        wait_for_port("127.0.0.1", self.metrics_port, 60, self.process.proc, self.process.log_file)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


class LinkCut:
    """The datacenter link down: the mirror's packets to the live brokers dropped (iptables, owner match).

    Only ever run inside the soak's own network namespace (soak.py re-executes itself under `unshare -n`), so
    the rules touch nothing outside the soak and vanish with it."""

    def __init__(self, live_ports: list[int]) -> None:
        self.live_ports = live_ports

    def _rules(self, action: str) -> None:
        for port in self.live_ports:
            subprocess.run(["iptables", action, "OUTPUT", "-o", "lo", "-p", "tcp", "--dport", str(port), "-m",
                            "owner", "--uid-owner", str(NOBODY), "-j", "DROP"], check=True, timeout=30)

    def cut(self) -> None:
        self._rules("-A")

    def heal(self) -> None:
        self._rules("-D")


@dataclass
class LoadRun:
    started: float
    ended: float = 0.0
    rc: int | None = None
    killed: bool = False
    result: dict = field(default_factory=dict)


class RepeatedLoad:
    """`ferry load` of the offline cluster into the warehouse, run again as soon as the last run ended (the
    hourly DAG's load task, on the soak's compressed clock); a run can be killed -9 (its whole process group:
    the Python driver and Spark's JVM)."""

    def __init__(self, root: Path, offline_zk: str, live_zk: str, topics: tuple[str, ...]) -> None:
        self.root, self.offline_zk, self.live_zk, self.topics = root, offline_zk, live_zk, topics
        self.runs: list[LoadRun] = []
        self.proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="loads", daemon=True)

    @property
    def pid(self) -> int | None:
        proc = self.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _argv(self, out: Path) -> list[str]:
        return [sys.executable, "-m", "ferry.cli", "load", "--zookeeper", self.offline_zk,
                "--topics", ",".join(self.topics), "--state-dir", str(self.root / "warehouse-state"),
                "--live-zookeeper", self.live_zk, "--json", str(out), "--max-per-split", "200000",
                "--conf", "spark.ui.enabled=false"]

    def run_once(self, timeout: float = 900.0) -> LoadRun:
        """One load run to its end (or killed at ``timeout``)."""
        out = self.root / "load-result.json"
        out.unlink(missing_ok=True)
        run = LoadRun(time.monotonic())
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
                   FERRY_SPARK_LOG_LEVEL="ERROR")
        with self._lock:
            self.runs.append(run)
            with (self.root / "load.out").open("ab") as log:
                self.proc = subprocess.Popen(self._argv(out), stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            run.rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill_group(self.proc)
            run.rc = self.proc.wait(30)
            run.killed = True
        run.ended = time.monotonic()
        if out.exists():
            try:
                run.result = json.loads(out.read_text())
            except ValueError:
                run.result = {}
        return run

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(3.0)

    def start(self) -> RepeatedLoad:
        self._thread.start()
        return self

    def stop(self, timeout: float = 900.0) -> None:
        """No new run; the one under way finishes."""
        self._stop.set()
        self._thread.join(timeout)

    @staticmethod
    def _kill_group(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def kill_running(self, min_age: float = 10.0, timeout: float = 50.0) -> str:
        """kill -9 the run under way once it is ``min_age`` seconds into its work (Spark up, reading)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                proc, run = self.proc, (self.runs[-1] if self.runs else None)
                if proc is not None and proc.poll() is None and run is not None \
                        and time.monotonic() - run.started >= min_age:
                    self._kill_group(proc)
                    run.killed = True
                    return f"load run {len(self.runs)} killed {time.monotonic() - run.started:.0f}s in"
            time.sleep(0.5)
        return "no load run under way long enough to kill"
