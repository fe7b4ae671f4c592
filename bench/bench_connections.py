"""Connections and memory (issue 20 item 4): a broker's RSS with 1,000 idle connections and after they close,
its peak RSS while 16 connections each announce a 100 MiB request and send it slowly, and the log lines
10,000 bad connections write. One broker (ferry.embedded), everything on 127.0.0.1, every loop bounded.

    .venv/bin/python bench/bench_connections.py [--idle 1000] [--slow 16] [--hostile 10000]

Run it with another checkout on PYTHONPATH (see bench/ab_mirror.py) to measure the broker from before.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_partitions import Cluster  # noqa: E402


def rss_mb(pid: int) -> float:
    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


def api_versions_frame(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 4) + b"idle"
    return struct.pack(">i", len(body)) + body


def recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--slow", type=int, default=16)
    ap.add_argument("--hostile", type=int, default=10_000)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ferry-bench-conns-"))
    cluster = Cluster(root)
    out: dict = {}
    try:
        pid = cluster.pid
        host, port = cluster.broker.bootstrap.rsplit(":", 1)
        time.sleep(1.0)
        out["rss_start_mb"] = rss_mb(pid)
        socks = []
        for i in range(args.idle):
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(api_versions_frame(i))
            socks.append(s)
        for s in socks:
            recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0])
        time.sleep(2.0)
        out[f"rss_{args.idle}_idle_mb"] = rss_mb(pid)
        for s in socks:
            s.close()
        time.sleep(3.0)
        out["rss_after_close_mb"] = rss_mb(pid)
        slow = []
        for i in range(args.slow):
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(struct.pack(">ihhi", 100 * 2**20, 0, 8, i) + bytes(4096))
            slow.append(s)
        peak = 0.0
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            for s in slow:
                try:
                    s.send(bytes(4096))
                except OSError:
                    pass
            peak = max(peak, rss_mb(pid))
            time.sleep(0.1)
        out[f"rss_peak_{args.slow}_slow_100MiB_requests_mb"] = peak
        for s in slow:
            s.close()
        time.sleep(2.0)
        out["rss_after_slow_mb"] = rss_mb(pid)
        log_start = cluster.broker.log_file.stat().st_size
        t0 = time.monotonic()
        for _ in range(args.hostile):
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(struct.pack(">i", -5))
            s.settimeout(5)
            try:
                s.recv(1)
            except OSError:
                pass
            s.close()
        out["hostile_s"] = round(time.monotonic() - t0, 1)
        time.sleep(1.0)
        with open(cluster.broker.log_file, "rb") as f:
            f.seek(log_start)
            text = f.read().decode(errors="replace")
        out[f"warning_lines_for_{args.hostile}_hostile"] = sum(1 for line in text.splitlines() if "WARNING" in line)
        out["rss_end_mb"] = rss_mb(pid)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
