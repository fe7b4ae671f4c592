"""Shared by the drivers and the orchestrator: payloads, disk usage, machine facts, result records."""

from __future__ import annotations

import os
import platform
import random
import time
from pathlib import Path

MESSAGE_SIZE = 200  # bytes, as in the paper
POOL = 4096  # distinct payloads, cycled (generating bytes must not be what we time)


def payloads(size: int = MESSAGE_SIZE, count: int = POOL, seed: int = 2011) -> list[bytes]:
    """Deterministic, incompressible payloads (random bytes): no system gains from compression."""
    rnd = random.Random(seed)
    return [rnd.randbytes(size) for _ in range(count)]


def disk_usage(path: Path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of every file under `path`.

    Allocated bytes (st_blocks * 512, what `du` shows) is what the store really costs: KahaDB journals
    and ferry's indexes are sparse preallocated files whose apparent size says nothing.
    """
    apparent = allocated = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except FileNotFoundError:
                continue
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def settled_disk_usage(path: Path, quiet_s: float = 2.0, max_s: float = 20.0) -> tuple[int, int]:
    """Disk usage once it stopped changing for `quiet_s` (brokers flush and checkpoint lazily)."""
    deadline = time.monotonic() + max_s
    last = disk_usage(path)
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = disk_usage(path)
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= quiet_s:
            break
    return last


def machine() -> dict:
    """nproc, CPU model, RAM, OS: what the numbers must be read against."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = int(line.split()[1]) / 2**20
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu_model": model, "ram_gb": round(mem_gb, 1),
            "kernel": platform.release(), "python": platform.python_version()}


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0
