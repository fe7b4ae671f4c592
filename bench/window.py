"""CPU accounting over exactly the timed part of a client phase.

Drivers call `begin()` where their clock starts and `end()` where it stops. In between, the client's
own CPU (all threads, librdkafka's included), the broker's CPU (the pids the orchestrator passes in)
and the whole machine's busy time are measured, in percent of one core. On a shared 2-core machine
"other" (everything else that ran meanwhile) is what says how far a number can be trusted.
"""

from __future__ import annotations

import resource
import time

import psutil

_broker_pids: list[int] = []
_start: tuple[float, float, float, float] | None = None
result: dict = {}


def configure(broker_pids: list[int]) -> None:
    global _broker_pids
    _broker_pids = list(broker_pids)


def _broker_cpu() -> float:
    total = 0.0
    for pid in _broker_pids:
        try:
            p = psutil.Process(pid)
            for q in [p, *p.children(recursive=True)]:
                t = q.cpu_times()
                total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _machine_busy() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)


def _now() -> tuple[float, float, float, float]:
    return time.monotonic(), _self_cpu(), _broker_cpu(), _machine_busy()


def begin() -> None:
    global _start
    _start = _now()


def end() -> None:
    if _start is None:
        return
    t1, c1, b1, m1 = _now()
    t0, c0, b0, m0 = _start
    dt = max(t1 - t0, 1e-6)
    client, broker, machine = (100 * (c1 - c0) / dt, 100 * (b1 - b0) / dt, 100 * (m1 - m0) / dt)
    result.update(client_cpu_pct=round(client, 1), broker_cpu_pct=round(broker, 1),
                  other_cpu_pct=round(max(0.0, machine - client - broker), 1))
