"""End to end through the mirror: live producer -> live broker -> `ferry mirror` -> offline broker ->
offline consumer, all on this machine (one ZooKeeper, one chroot per datacenter).

Two runs, each on its own topic:
  - throughput: N messages as fast as the producer goes; messages/s = N / (first send .. last receive);
    its latencies include the backlog, so they are reported but not the headline;
  - latency: a paced producer (default 5,000 msg/s for 10 s): p50/p99 of send -> offline receive.
Brokers and the mirror process are sampled (CPU, RSS) meanwhile. Everything is stopped in `finally`.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from sampler import ResourceSampler
from servers import ROOT, _spawn, _terminate

from ferry.embedded import BrokerProcess, ZooKeeperServer

log = logging.getLogger("bench.e2e")
HERE = Path(__file__).resolve().parent


def _client(spec: dict) -> subprocess.Popen:
    argv = [sys.executable, str(HERE / "client.py"), json.dumps(spec)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen, timeout: float) -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"ok": False, "messages": 0, "msgs_per_s": 0.0, "errors": [f"exit {proc.returncode}: {err[-800:]}"]}


def _create_topic(zk_connect: str, name: str) -> None:
    from ferry.zk import ClusterRegistry

    reg = ClusterRegistry(zk_connect)
    reg.start()
    try:
        reg.create_topic(name, 1)
    finally:
        reg.stop()


def _one_run(live: BrokerProcess, offline: BrokerProcess, zk_live: str, topic: str, messages: int,
             per_second: float, time_limit: float, pids: list[int]) -> dict:
    _create_topic(zk_live, topic)
    sampler = ResourceSampler(pids).start()
    try:
        consumer = _client({"system": "e2e", "op": "consume", "address": offline.bootstrap, "queue": topic,
                            "messages": messages, "time_limit_s": time_limit, "broker_pids": pids})
        time.sleep(1.0)  # the consumer is subscribed before the first message is sent
        producer = _client({"system": "e2e", "op": "produce", "address": live.bootstrap, "queue": topic,
                            "messages": messages, "rate": per_second, "time_limit_s": time_limit,
                            "broker_pids": pids})
        prod = _result(producer, time_limit + 60)
        cons = _result(consumer, time_limit + 60)
    finally:
        res = sampler.stop()
    return {"producer": prod, "consumer": cons, "resources": res.to_dict(),
            "ok": bool(prod.get("ok") and cons.get("ok"))}


def run_e2e(root: Path, messages: int, latency_rate: float = 5000.0, latency_seconds: float = 10.0,
            streams: int = 1, broker_args: tuple[str, ...] = ()) -> dict:
    """``broker_args``: extra `ferry broker` flags for both brokers, e.g. ("--flush-ms", "20") for a
    low-latency setting (the default flush.ms of 200 puts up to ~250 ms into every hop's latency)."""
    zk = ZooKeeperServer(data_dir=root / "zookeeper")
    zk_live = zk_offline = ""
    live = offline = None
    mirror = None
    out: dict = {"messages": messages, "errors": [], "broker_args": list(broker_args)}
    try:
        zk.start()
        zk_live, zk_offline = f"{zk.connect}/ferry/live", f"{zk.connect}/ferry/offline"
        live = BrokerProcess(1, root / "live" / "data", zk_live, "live", extra_args=broker_args).start(timeout=60)
        offline = BrokerProcess(2, root / "offline" / "data", zk_offline, "offline",
                                extra_args=broker_args).start(timeout=60)
        mirror = _spawn([sys.executable, "-m", "ferry.cli", "mirror", "--source-zookeeper", zk_live,
                         "--target-zookeeper", zk_offline, "--include", "e2e_.*", "--streams", str(streams),
                         "--no-audit", "--log-level", "WARNING"], root / "mirror.out", cwd=ROOT)
        time.sleep(2.0)
        if mirror.poll() is not None:
            raise RuntimeError(f"mirror exited with {mirror.returncode}: "
                               + (root / "mirror.out").read_text(errors="replace")[-800:])
        pids = [live.pid, offline.pid, mirror.pid]
        limit = 60.0 + messages / 2000.0
        log.info("e2e: throughput run, %d messages", messages)
        out["throughput"] = _one_run(live, offline, zk_live, "e2e_throughput", messages, 0, limit, pids)
        n = int(latency_rate * latency_seconds)
        log.info("e2e: latency run, %d messages at %.0f/s", n, latency_rate)
        out["latency"] = _one_run(live, offline, zk_live, "e2e_latency", n, latency_rate, limit, pids)
        out["latency_rate"] = latency_rate
        out["streams"] = streams
        out["pids"] = {"live": live.pid, "offline": offline.pid, "mirror": mirror.pid}
    except Exception as e:  # noqa: BLE001 - reported in RESULTS.md
        log.exception("e2e failed")
        out["errors"].append(f"{type(e).__name__}: {e}")
    finally:
        _terminate(mirror, timeout=20)
        for b in (offline, live):
            if b is not None:
                b.stop(timeout=30)
        zk.stop()
    return out
