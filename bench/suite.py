"""Run the paper's section 5 experiments against one system: start it, measure, stop it (always).

Per system, on a fresh server, after a warm-up (20,000 messages produced and consumed on a queue of their
own, so the JVM peers are measured warm):
  1. produce N messages with batch 1 into queue/topic `b1`, then measure the disk it grew by;
  2. produce N messages with batch 50 into `b50`, measure the disk again;
  3. consume the N messages of `b50` (read everything back).
ferry also runs the message-set producer (`ferry-sets`) into its own topics and the message-set consumer
(lean_consumer.py, 200 KB and 1 MB fetches) on the same `b50` topic, and, for storage only, the
confluent-kafka producer with compression (`compression` phases, each on a topic of its own).

Each client phase is a child process (bench/client.py) with a timeout; the broker's processes and the
client's process are sampled with psutil meanwhile.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from common import MESSAGE_SIZE, settled_disk_usage
from pyspy_profile import PySpy
from sampler import ResourceSampler
from servers import ActiveMQServer, FerryServer, RabbitMQServer

log = logging.getLogger("bench")
HERE = Path(__file__).resolve().parent

WARMUP_MESSAGES = 20_000
# message-set consumer phases: (phase key, max_bytes per fetch); 200 KB is the paper's pull size
SETS_CONSUMERS = (("consume_ferry-sets", 204_800), ("consume_ferry-sets_1mb", 1_048_576))
# storage with compression (ferry, confluent-kafka producer): (codec, messages per set); "none" at
# batch 200 separates what the larger set does from what the codec does. "topic-X": the producer sends
# uncompressed sets into a topic created with compression.type=X (the broker converts each set).
COMPRESSION = (("none", 200), ("gzip", 50), ("gzip", 200), ("zstd", 50), ("zstd", 200), ("lz4", 200),
               ("topic-gzip", 50), ("topic-zstd", 50), ("topic-zstd", 200), ("topic-lz4", 200))
TOPIC_CODEC_PREFIX = "topic-"
COMPRESSION_MESSAGES = 200_000
SERVERS = {"ferry": FerryServer, "rabbitmq": RabbitMQServer, "activemq": ActiveMQServer}


def phase_time_limit(messages: int) -> float:
    """Generous but bounded: 60 s + 1 ms per message (the slowest peer path is ~3k msg/s)."""
    return 60.0 + messages / 1000.0


def run_client(spec: dict, broker_pids: list[int], timeout_s: float, profile: Path | None = None) -> dict:
    """Run one client phase as a child process; sample the broker meanwhile (and py-spy it if asked).

    The client itself reports CPU (client, broker, rest of the machine) over its timed window.
    """
    argv = [sys.executable, str(HERE / "client.py"), json.dumps({**spec, "broker_pids": broker_pids})]
    spy = PySpy(broker_pids[0], profile).start() if profile is not None and broker_pids else None
    broker = ResourceSampler(broker_pids).start()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        err += f"\nclient killed after {timeout_s:.0f}s"
    finally:
        broker_res = broker.stop()
        prof = spy.stop() if spy is not None else None
    result = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    if result is None:
        result = {"ok": False, "messages": 0, "seconds": 0.0, "msgs_per_s": 0.0,
                  "errors": [f"client exited {proc.returncode} without a result: {err.strip()[-800:]}"]}
    result["broker"] = broker_res.to_dict()
    result["broker_timeline"] = broker.timeline
    if prof is not None:
        result["profile"] = prof
    return result


def _address(system: str, server) -> str | int:
    return server.bootstrap if system == "ferry" else server.port


def _queue(tag: str, batch: int) -> str:
    return f"{tag.replace('-', '_')}_b{batch}"


def _census(server, addr, queue: str) -> dict | None:
    """Batches and records per batch of a ferry topic (from the batch headers; not timed)."""
    spec = {"system": "ferry", "op": "census", "address": addr, "queue": queue, "messages": 0, "batch": 0,
            "time_limit_s": 60}
    r = run_client(spec, server.pids(), 120)
    if r.get("errors") or "batches" not in r:
        log.warning("census of %s failed: %s", queue, r.get("errors"))
        return None
    return {k: r[k] for k in ("batches", "records", "log_bytes", "records_per_batch", "log_bytes_per_record",
                              "codecs")}


def _produce_phase(system: str, server, addr, tag: str, batch: int, n: int, before: int,
                   compression: str | None = None) -> tuple[dict, int]:
    """One timed producer phase into its own topic, then the disk it grew by; (result, disk after)."""
    limit = phase_time_limit(n)
    spec = {"system": tag if compression is None else system, "op": "produce", "address": addr,
            "queue": _queue(tag, batch), "messages": n, "batch": batch, "time_limit_s": limit}
    if compression is not None:
        spec["compression"] = "none" if compression.startswith(TOPIC_CODEC_PREFIX) else compression
    r = run_client(spec, server.pids(), limit + 60)
    _, after = settled_disk_usage(server.data_dir)
    r["disk_bytes"] = after - before
    stored = r.get("messages") or 0
    r["bytes_per_message"] = r["disk_bytes"] / stored if stored else None
    r["overhead_bytes"] = (r["bytes_per_message"] - MESSAGE_SIZE) if stored else None
    if system == "ferry" and stored:
        r["census"] = _census(server, addr, _queue(tag, batch))
    return r, after


def run_system(system: str, root: Path, messages: int, batches: tuple[int, ...] = (1, 50),
               extra_producers: tuple[str, ...] = (), profile_messages: int = 0,
               compression: tuple[tuple[str, int], ...] = (), compression_messages: int = 0) -> dict:
    """All phases for one system; the server is stopped whatever happens.

    `compression` (ferry): extra confluent-kafka producer phases (codec, batch) measured for storage only,
    with min(messages, compression_messages) messages each. The message-set consumer runs when
    `ferry-sets` is among the extra producers.

    With `profile_messages` > 0 (ferry), a second pass repeats each phase with that many messages and
    py-spy attached to the broker: the profile explains the first pass's numbers without skewing them.
    """
    server = SERVERS[system](root / system)
    out: dict = {"system": system, "messages": messages, "phases": {}, "profiles": {}, "errors": []}
    limit = phase_time_limit(messages)
    try:
        t = time.monotonic()
        server.start()
        out["startup_s"] = round(time.monotonic() - t, 2)
        producers = [system, *extra_producers]
        for tag in producers:
            for b in batches:
                server.create_queue(_queue(tag, b))
        for codec, b in compression:
            topic_codec = codec[len(TOPIC_CODEC_PREFIX):] if codec.startswith(TOPIC_CODEC_PREFIX) else None
            server.create_queue(_queue(f"{system}-{codec}", b),
                                config={"compression.type": topic_codec} if topic_codec else None)
        addr = _address(system, server)
        _warm_up(system, server, addr, min(WARMUP_MESSAGES, messages))
        _, before = settled_disk_usage(server.data_dir)
        out["disk_empty_bytes"] = before
        for tag in producers:
            for b in batches:
                log.info("%s: produce %d messages, batch %d (%s)", system, messages, b, tag)
                r, before = _produce_phase(system, server, addr, tag, b, messages, before)
                out["phases"][f"produce_{tag}_b{b}"] = r
                _log_phase(system, f"produce {tag} b{b}", r)
        q = _queue(system, max(batches))
        consumers = [("consume", system, None)]
        if "ferry-sets" in extra_producers:
            consumers += [(key, "ferry-sets", fb) for key, fb in SETS_CONSUMERS]
        for key, tag, fetch_bytes in consumers:
            log.info("%s: consume %d messages from %s (%s)", system, messages, q, tag)
            spec = {"system": tag, "op": "consume", "address": addr, "queue": q, "messages": messages,
                    "batch": 0, "time_limit_s": limit}
            if fetch_bytes:
                spec["fetch_bytes"] = fetch_bytes
            r = run_client(spec, server.pids(), limit + 60)
            out["phases"][key] = r
            _log_phase(system, key.replace("_", " "), r)
        if compression:
            k = min(messages, compression_messages or messages)
            out["compression_messages"] = k
            for codec, b in compression:
                tag = f"{system}-{codec}"
                log.info("%s: produce %d messages, batch %d, compression %s (storage)", system, k, b, codec)
                r, before = _produce_phase(system, server, addr, tag, b, k, before, compression=codec)
                out["phases"][f"produce_{tag}_b{b}"] = r
                _log_phase(system, f"produce {tag} b{b}", r)
        if profile_messages:
            _profile_pass(out, server, addr, producers, batches, profile_messages, root / "profiles")
    except Exception as e:  # noqa: BLE001 - one system failing must not lose the others' results
        log.exception("%s failed", system)
        out["errors"].append(f"{type(e).__name__}: {e}")
    finally:
        try:
            server.stop()
        except Exception as e:  # noqa: BLE001
            out["errors"].append(f"stop: {type(e).__name__}: {e}")
    return out


def _warm_up(system: str, server, addr, n: int) -> None:
    """Produce and consume `n` messages on a queue of its own before anything is measured.

    The JVM peers run their first thousands of messages interpreted (ActiveMQ measured 2.5k msg/s cold,
    6k warm here); a broker in service is warm. Every system gets the same warm-up.
    """
    server.create_queue("warmup")
    limit = phase_time_limit(n)
    for spec in ({"system": system, "op": "produce", "address": addr, "queue": "warmup", "messages": n,
                  "batch": 50, "time_limit_s": limit},
                 {"system": system, "op": "consume", "address": addr, "queue": "warmup", "messages": n,
                  "batch": 0, "time_limit_s": limit}):
        r = run_client(spec, server.pids(), limit + 60)
        if not r.get("ok"):
            log.warning("%s warm-up %s: %s", system, spec["op"], r.get("errors"))
    log.info("%s: warmed up with %d messages", system, n)


def _profile_pass(out: dict, server, addr, producers: list[str], batches: tuple[int, ...], n: int,
                  pdir: Path) -> None:
    """Each phase again with py-spy on the broker: batch-1 phases with n/10 messages (they are slow),
    the others with 2n (they are fast: enough samples)."""
    for tag in producers:
        for b in batches:
            q = "prof_" + _queue(tag, b)
            server.create_queue(q)
            k = max(1_000, n // 10) if b == 1 else 2 * n
            limit = phase_time_limit(k)
            log.info("%s: profiling produce %s batch %d (%d messages)", out["system"], tag, b, k)
            spec = {"system": tag, "op": "produce", "address": addr, "queue": q, "messages": k, "batch": b,
                    "time_limit_s": limit}
            r = run_client(spec, server.pids(), limit + 60, profile=pdir / f"produce_{tag}_b{b}.txt")
            out["profiles"][f"produce_{tag}_b{b}"] = _profile_entry(r)
    k = 2 * n
    limit = phase_time_limit(k)
    spec = {"system": out["system"], "op": "consume", "address": addr, "queue": "prof_" + _queue(producers[-1],
            max(batches)), "messages": k, "batch": 0, "time_limit_s": limit}
    log.info("%s: profiling consume (%d messages)", out["system"], k)
    r = run_client(spec, server.pids(), limit + 60, profile=pdir / "consume.txt")
    out["profiles"]["consume"] = _profile_entry(r)
    if "ferry-sets" in producers:
        key, fetch_bytes = SETS_CONSUMERS[0]
        spec = {**spec, "system": "ferry-sets", "fetch_bytes": fetch_bytes}
        log.info("%s: profiling the message-set consumer (%d messages)", out["system"], k)
        r = run_client(spec, server.pids(), limit + 60, profile=pdir / f"{key}.txt")
        out["profiles"][key] = _profile_entry(r)


def _profile_entry(r: dict) -> dict:
    return {"messages": r.get("messages"), "seconds": r.get("seconds"), "msgs_per_s": r.get("msgs_per_s"),
            "window": r.get("window", {}), "profile": r.get("profile")}


def _log_phase(system: str, what: str, r: dict) -> None:
    w = r.get("window", {})
    log.info("%s %s: %s msgs in %.2fs = %.0f msg/s ok=%s broker rss %.0f MB | CPU %% of a core while timed: "
             "broker %s client %s other %s%s%s",
             system, what, r.get("messages"), r.get("seconds", 0), r.get("msgs_per_s", 0), r.get("ok"),
             r["broker"]["rss_max_mb"], w.get("broker_cpu_pct"),
             w.get("client_cpu_pct"), w.get("other_cpu_pct"),
             f" overhead {r['overhead_bytes']:.1f} B/msg" if r.get("overhead_bytes") is not None else "",
             f" errors {r['errors']}" if r.get("errors") else "")
