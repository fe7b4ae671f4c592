"""Run the paper's section 5 experiments against one system: start it, measure, stop it (always).

Per system, on a fresh server with an empty store:
  1. produce N messages with batch 1 into queue/topic `b1`, then measure the disk it grew by;
  2. produce N messages with batch 50 into `b50`, measure the disk again;
  3. consume the N messages of `b50` (read everything back).
ferry also runs the message-set producer (`ferry-sets`) into its own topics.

Each client phase is a child process (bench/client.py) with a timeout; the broker's processes and the
client's process are sampled with psutil meanwhile.
"""

from __future__ import annotations

import json
import logging
import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil
from common import MESSAGE_SIZE, settled_disk_usage
from sampler import ResourceSampler
from servers import ActiveMQServer, FerryServer, RabbitMQServer

log = logging.getLogger("bench")
HERE = Path(__file__).resolve().parent

SERVERS = {"ferry": FerryServer, "rabbitmq": RabbitMQServer, "activemq": ActiveMQServer}


def phase_time_limit(messages: int) -> float:
    """Generous but bounded: 60 s + 1 ms per message (the slowest peer path is ~3k msg/s)."""
    return 60.0 + messages / 1000.0


def run_client(spec: dict, broker_pids: list[int], timeout_s: float) -> dict:
    """Run one client phase as a child process; sample broker and client while it runs."""
    argv = [sys.executable, str(HERE / "client.py"), json.dumps({**spec, "broker_pids": broker_pids})]
    broker = ResourceSampler(broker_pids).start()
    machine0, t0 = _busy_seconds(), time.monotonic()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        err += f"\nclient killed after {timeout_s:.0f}s"
    finally:
        broker_res = broker.stop()
        children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        client_cpu_s = (children1.ru_utime + children1.ru_stime) - (children0.ru_utime + children0.ru_stime)
        machine_pct = 100.0 * (_busy_seconds() - machine0) / max(time.monotonic() - t0, 1e-6)
    result = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    if result is None:
        result = {"ok": False, "messages": 0, "seconds": 0.0, "msgs_per_s": 0.0,
                  "errors": [f"client exited {proc.returncode} without a result: {err.strip()[-800:]}"]}
    result["broker"] = broker_res.to_dict()
    result["broker_timeline"] = broker.timeline
    client_pct = 100.0 * client_cpu_s / max(time.monotonic() - t0, 1e-6)
    result["client_cpu_avg_pct"] = round(client_pct, 1)
    # everything else on the (shared) machine meanwhile, in % of one core (the machine has nproc x 100)
    result["other_cpu_pct"] = round(max(0.0, machine_pct - broker_res.cpu_avg_pct - client_pct), 1)
    return result


def _busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores, all processes)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)


def _address(system: str, server) -> str | int:
    return server.bootstrap if system == "ferry" else server.port


def run_system(system: str, root: Path, messages: int, batches: tuple[int, ...] = (1, 50),
               extra_producers: tuple[str, ...] = ()) -> dict:
    """All phases for one system; the server is stopped whatever happens."""
    server = SERVERS[system](root / system)
    out: dict = {"system": system, "messages": messages, "phases": {}, "errors": []}
    limit = phase_time_limit(messages)
    try:
        t = time.monotonic()
        server.start()
        out["startup_s"] = round(time.monotonic() - t, 2)
        producers = [(system, system)] + [(p, p) for p in extra_producers]
        queues = [f"{tag.replace('-', '_')}_b{b}" for tag, _ in producers for b in batches]
        for q in queues:
            server.create_queue(q)
        _, before = settled_disk_usage(server.data_dir)
        out["disk_empty_bytes"] = before
        addr = _address(system, server)
        for tag, client_system in producers:
            for b in batches:
                q = f"{tag.replace('-', '_')}_b{b}"
                log.info("%s: produce %d messages, batch %d (%s)", system, messages, b, client_system)
                spec = {"system": client_system, "op": "produce", "address": addr, "queue": q,
                        "messages": messages, "batch": b, "time_limit_s": limit}
                r = run_client(spec, server.pids(), limit + 60)
                _, after = settled_disk_usage(server.data_dir)
                r["disk_bytes"] = after - before
                stored = r.get("messages") or 0
                r["bytes_per_message"] = r["disk_bytes"] / stored if stored else None
                r["overhead_bytes"] = (r["bytes_per_message"] - MESSAGE_SIZE) if stored else None
                before = after
                out["phases"][f"produce_{tag}_b{b}"] = r
                _log_phase(system, f"produce {tag} b{b}", r)
        q = f"{system}_b{max(batches)}"
        log.info("%s: consume %d messages from %s", system, messages, q)
        spec = {"system": system, "op": "consume", "address": addr, "queue": q, "messages": messages,
                "batch": 0, "time_limit_s": limit}
        r = run_client(spec, server.pids(), limit + 60)
        out["phases"]["consume"] = r
        _log_phase(system, "consume", r)
    except Exception as e:  # noqa: BLE001 - one system failing must not lose the others' results
        log.exception("%s failed", system)
        out["errors"].append(f"{type(e).__name__}: {e}")
    finally:
        try:
            server.stop()
        except Exception as e:  # noqa: BLE001
            out["errors"].append(f"stop: {type(e).__name__}: {e}")
    return out


def _log_phase(system: str, what: str, r: dict) -> None:
    log.info("%s %s: %s msgs in %.2fs = %.0f msg/s ok=%s broker cpu %.0f%% rss %.0f MB | timed window: broker %s%% client %s%% other %s%%%s%s",
             system, what, r.get("messages"), r.get("seconds", 0), r.get("msgs_per_s", 0), r.get("ok"),
             r["broker"]["cpu_avg_pct"], r["broker"]["rss_max_mb"], r.get("window", {}).get("broker_cpu_pct"),
             r.get("window", {}).get("client_cpu_pct"), r.get("window", {}).get("other_cpu_pct"),
             f" overhead {r['overhead_bytes']:.1f} B/msg" if r.get("overhead_bytes") is not None else "",
             f" errors {r['errors']}" if r.get("errors") else "")
