"""Run every benchmark and write bench/RESULTS.md, bench/results.png and bench/results.json.

    .venv/bin/python bench/run_all.py [--messages N] [--peer-messages M] [--quick] [--systems ...]

Starts ferry (ZooKeeper + broker), RabbitMQ and ActiveMQ one after the other on 127.0.0.1 in a temp
dir, runs the paper's producer (batch 1, batch 50), consumer and storage experiments against each, a
py-spy profiled pass of ferry's broker, and the end-to-end run through the mirror. ferry also gets the
message-set producer and consumer (--no-message-sets skips them) and storage rows with compression
(--no-compression skips them). Every server is
stopped and the temp dir removed at the end, also on error or Ctrl-C (unless --keep).
These are benchmarks, not tests: nothing here asserts; a failed phase is reported in RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (str(HERE), str(HERE.parent)):
    if p not in sys.path:
        sys.path.insert(0, p)

import report  # noqa: E402
from common import machine  # noqa: E402
from suite import COMPRESSION, COMPRESSION_MESSAGES, run_system  # noqa: E402

log = logging.getLogger("bench")
SYSTEMS = ("ferry", "rabbitmq", "activemq")
LOW_LATENCY_BROKER_ARGS = ("--flush-ms", "20")


def _versions() -> dict[str, str]:
    import subprocess
    from importlib.metadata import version

    out = {}
    for dist in ("confluent-kafka", "aiokafka", "pika", "stomp.py"):
        try:
            out[dist] = version(dist)
        except Exception:  # noqa: BLE001
            pass
    try:
        import confluent_kafka

        out["librdkafka"] = confluent_kafka.libversion()[0]
    except Exception:  # noqa: BLE001
        pass
    for pkg in ("rabbitmq-server", "activemq", "zookeeper"):
        try:
            v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True,
                               timeout=10).stdout.strip()
            if v:
                out[pkg] = v
        except (OSError, subprocess.TimeoutExpired):
            pass
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/run_all.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=None,
                    help="messages per phase (default 1,000,000; --quick 100,000)")
    ap.add_argument("--peer-messages", type=int, default=None,
                    help="messages per phase for RabbitMQ and ActiveMQ (default: the same as --messages, the "
                         "issue's 'same message count for all'); a smaller count shortens a run, since the peers "
                         "are ~50x slower here")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: fewer messages, short profile pass and end-to-end run")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of ferry,rabbitmq,activemq")
    ap.add_argument("--no-message-sets", action="store_true",
                    help="skip ferry's message-set producer and message-set consumer rows")
    ap.add_argument("--no-compression", action="store_true",
                    help="skip ferry's storage rows with compression (confluent-kafka producer, gzip/zstd/lz4)")
    ap.add_argument("--compression-messages", type=int, default=None,
                    help="messages per compressed storage phase (default min(messages, 200,000))")
    ap.add_argument("--no-profile", action="store_true", help="skip the py-spy profiled pass of ferry's broker")
    ap.add_argument("--skip-e2e", action="store_true", help="skip the end-to-end run through the mirror")
    ap.add_argument("--e2e-messages", type=int, default=None, help="messages of the end-to-end throughput run")
    ap.add_argument("--e2e-rate", type=float, default=5000.0, help="msg/s of the paced end-to-end latency run")
    ap.add_argument("--out-dir", type=Path, default=HERE, help="where RESULTS.md, results.png, results.json go")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (data, server logs, profiles)")
    ap.add_argument("--merge", action="store_true",
                    help="update OUT_DIR/results.json: replace only the systems (and e2e) measured now")
    ap.add_argument("--report-only", action="store_true",
                    help="measure nothing: re-render RESULTS.md and results.png from OUT_DIR/results.json")
    args = ap.parse_args(argv)
    if args.messages is None:
        args.messages = 100_000 if args.quick else 1_000_000
    if args.peer_messages is None:
        args.peer_messages = args.messages
    if args.messages <= 0 or args.peer_messages <= 0:
        ap.error("--messages and --peer-messages must be positive")
    if args.compression_messages is not None and args.compression_messages <= 0:
        ap.error("--compression-messages must be positive")
    unknown = set(args.systems.split(",")) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown systems: {', '.join(sorted(unknown))}")
    return args


def _merge(old: dict, new: dict) -> dict:
    """The earlier run with the systems (and e2e) of this run replaced; the update is recorded."""
    merged = dict(old)
    merged["systems"] = {**old.get("systems", {}), **new["systems"]}
    for key in ("e2e", "e2e_low_latency"):
        if new.get(key) is not None:
            merged[key] = new[key]
    what = sorted(new["systems"]) + (["e2e"] if new.get("e2e") is not None else [])
    merged["updates"] = [*old.get("updates", []), {"command": new["command"], "generated": new["generated"],
                                                   "replaced": what, "wall_s": new.get("wall_s", 0)}]
    return merged


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.report_only:
        out = args.out_dir
        results = json.loads((out / "results.json").read_text())
        report.write(results, out / "RESULTS.md", out / "results.png", out / "results.json")
        log.info("re-rendered %s and %s", out / "RESULTS.md", out / "results.png")
        return 0
    for noisy in ("kazoo", "broker", "pika", "stomp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    exe = Path(sys.executable)
    python = str(exe.relative_to(HERE.parent)) if exe.is_relative_to(HERE.parent) else "python"
    args_text = shlex.join(sys.argv[1:] if argv is None else argv)
    command = f"{python} bench/run_all.py" + (f" {args_text}" if args_text else "")
    root = Path(tempfile.mkdtemp(prefix="ferry-bench-"))
    log.info("working in %s", root)
    started = time.monotonic()
    results: dict = {
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command, "machine": machine(), "versions": _versions(), "messages": args.messages,
        "peer_messages": args.peer_messages,
        "quick": args.quick, "systems": {}, "e2e": None,
    }
    try:
        for system in args.systems.split(","):
            extra = ("ferry-sets",) if system == "ferry" and not args.no_message_sets else ()
            n = args.messages if system == "ferry" else args.peer_messages
            prof = 0 if system != "ferry" or args.no_profile else max(10_000, n // 2)
            codecs = COMPRESSION if system == "ferry" and not args.no_compression else ()
            results["systems"][system] = run_system(
                system, root, n, extra_producers=extra, profile_messages=prof, compression=codecs,
                compression_messages=args.compression_messages or COMPRESSION_MESSAGES)
        if not args.skip_e2e and "ferry" in args.systems.split(","):
            from e2e import run_e2e

            n = args.e2e_messages or (50_000 if args.quick else 200_000)
            results["e2e"] = run_e2e(root / "e2e", n, latency_rate=args.e2e_rate,
                                     latency_seconds=5.0 if args.quick else 10.0)
            # the same with brokers an operator would run for low latency: flush (and expose) every 20 ms
            results["e2e_low_latency"] = run_e2e(root / "e2e-low-latency", n, latency_rate=args.e2e_rate,
                                                 latency_seconds=5.0 if args.quick else 10.0,
                                                 broker_args=LOW_LATENCY_BROKER_ARGS)
    except KeyboardInterrupt:
        log.warning("interrupted: writing what was measured so far")
    finally:
        results["wall_s"] = time.monotonic() - started
        if args.keep:
            log.info("kept %s", root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    if args.merge and (out / "results.json").exists():
        results = _merge(json.loads((out / "results.json").read_text()), results)
    report.write(results, out / "RESULTS.md", out / "results.png", out / "results.json")
    log.info("wrote %s, %s, %s", out / "RESULTS.md", out / "results.png", out / "results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
