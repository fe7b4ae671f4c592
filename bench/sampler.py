"""Broker RSS and CPU during a run, sampled with psutil in a background thread.

CPU is reported in percent of ONE core (100 = one core busy; this machine has two), averaged over the
run from the processes' cpu_times (exact) and as the highest sampled interval. RSS is the sum over the
sampled processes (and their children): first sample, last sample and highest sample, so that a log
that grows while memory stays flat shows up as rss_end ~ rss_start.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

import psutil


@dataclass
class ResourceSummary:
    cpu_avg_pct: float
    cpu_max_pct: float
    rss_start_mb: float
    rss_end_mb: float
    rss_max_mb: float
    samples: int

    def to_dict(self) -> dict:
        return asdict(self)


def _tree(pids: list[int]) -> list[psutil.Process]:
    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        procs.append(p)
        try:
            procs.extend(p.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return procs


def _cpu_seconds(procs: list[psutil.Process], last: dict[int, float]) -> float:
    """Sum of user+system seconds; a process that has exited counts with its last sampled value."""
    for p in procs:
        try:
            t = p.cpu_times()
            last[p.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return sum(last.values())


def _rss(procs: list[psutil.Process]) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


class ResourceSampler:
    """Sample the given processes every `interval` seconds until `stop()` (bounded by `max_seconds`)."""

    def __init__(self, pids: list[int], interval: float = 0.25, max_seconds: float = 3600.0) -> None:
        self.pids = pids
        self.interval = interval
        self.max_seconds = max_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)
        self.rss: list[int] = []
        self.cpu_pct: list[float] = []
        self.timeline: list[tuple[float, float, float]] = []  # (t, cpu %, rss MB)

    def start(self) -> ResourceSampler:
        self._procs = _tree(self.pids)
        self._t0 = time.monotonic()
        self._last: dict[int, float] = {}
        self._cpu0 = _cpu_seconds(self._procs, self._last)
        self.rss.append(_rss(self._procs))
        self._thread.start()
        return self

    def _run(self) -> None:
        last_t, last_cpu = self._t0, self._cpu0
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            if now - self._t0 > self.max_seconds:
                return
            cpu = _cpu_seconds(self._procs, self._last)
            rss = _rss(self._procs)
            pct = 100.0 * (cpu - last_cpu) / max(now - last_t, 1e-6)
            self.cpu_pct.append(pct)
            self.rss.append(rss)
            self.timeline.append((now - self._t0, pct, rss / 2**20))
            last_t, last_cpu = now, cpu

    def stop(self) -> ResourceSummary:
        self._stop.set()
        self._thread.join(timeout=5)
        elapsed = max(time.monotonic() - self._t0, 1e-6)
        cpu = _cpu_seconds(self._procs, self._last)
        self.rss.append(_rss(self._procs))
        mb = 2**20
        return ResourceSummary(
            cpu_avg_pct=round(100.0 * (cpu - self._cpu0) / elapsed, 1),
            cpu_max_pct=round(max(self.cpu_pct, default=0.0), 1),
            rss_start_mb=round(self.rss[0] / mb, 1),
            rss_end_mb=round(self.rss[-1] / mb, 1),
            rss_max_mb=round(max(self.rss) / mb, 1),
            samples=len(self.cpu_pct),
        )
