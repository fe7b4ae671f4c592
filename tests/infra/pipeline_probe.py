"""Produce or count test messages inside a ferry container (run there as `python - ARGS < this file`).

    produce --bootstrap B --topic T --count N --prefix P [--audited --zookeeper ZK --datacenter DC]
        N messages "P-<i>" (ferry's audited Producer with --audited, else plain confluent-kafka);
        prints {"delivered": n, "failed": n}
    stream --bootstrap B --topic T --prefix P --rate R [--duration S] [--timeout S]
        "P-<i>" at R per second (acks=all, idempotent confluent-kafka) until a "stop" line (or EOF) on stdin or
        S seconds, then waits up to --timeout for the last deliveries; prints "DELIVERED n" on the first
        delivery, then {"produced": n, "delivered": n, "failed": n, "failures": [...], "retries": n,
        "transport_errors": n, "request_timeouts": n} (librdkafka's statistics summed over brokers: requests
        sent again, e.g. after NOT_LEADER_OR_FOLLOWER or a closed connection; send/receive errors; requests
        timed out). Run it as `python -c`: stdin is the stop signal.
    count --bootstrap B --topic T --prefix P --expect N [--timeout S]
        reads every partition from the beginning until N distinct "P-*" values were seen (or the
        timeout); prints {"seen": n, "distinct": n, "duplicates": n, "missing_sample": [...],
        "duplicate_sample": {value: [[partition, offset], ...]}}

Every mode takes --config FILE: librdkafka client properties (security.protocol, sasl.*, ssl.*) of a secured
cluster (docs/security.md "Client settings"), e.g. a SASL_SSL user's.
    denied --bootstrap B --topic T --config F
        one message produced (not idempotent): prints {"error": "<librdkafka error name>" or null}

Only the standard library, confluent-kafka and (for --audited) ferry are needed, all in ferry's venv.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def settings(args: argparse.Namespace) -> dict:
    """The --config file's properties (none: PLAINTEXT)."""
    if not args.config:
        return {}
    with open(args.config) as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith(("#", "!"))]
    return dict(ln.split("=", 1) for ln in lines)


def denied(args: argparse.Namespace) -> dict:
    """One plain produce: the error a refused principal gets (TOPIC_AUTHORIZATION_FAILED...), or None."""
    from confluent_kafka import Producer as CProducer

    errors: list = []
    p = CProducer({**settings(args), "bootstrap.servers": args.bootstrap, "acks": "all", "log_level": 0,
                   "enable.idempotence": False, "message.timeout.ms": int(args.timeout * 1000)})
    p.produce(args.topic, b"denied-probe", on_delivery=lambda err, msg: errors.append(err))
    left = p.flush(args.timeout + 10)
    return {"error": errors[0].name() if errors and errors[0] is not None else ("undelivered" if left else None)}


def produce(args: argparse.Namespace) -> dict:
    values = [f"{args.prefix}-{i}".encode() for i in range(args.count)]
    if args.audited:
        from ferry.client.producer import Producer
        from ferry.wire.client_config import ClientConfig

        config = ClientConfig.from_file(args.config) if args.config else None
        p = Producer(args.bootstrap, application="probe", datacenter=args.datacenter, audit_interval_s=1.0,
                     client_config=config)
        for v in values:
            p.send(args.topic, v)
        undelivered = p.close(timeout=args.timeout)
        return {"delivered": args.count - undelivered, "failed": undelivered}
    from confluent_kafka import Producer as CProducer

    failed = []
    p = CProducer({**settings(args), "bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 5,
                   "enable.idempotence": True, "log_level": 3})
    for v in values:
        while True:
            try:
                p.produce(args.topic, v, on_delivery=lambda err, msg: failed.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.1)
    left = p.flush(args.timeout)
    return {"delivered": args.count - len(failed) - left, "failed": len(failed) + left}


def stream(args: argparse.Namespace) -> dict:
    import threading

    from confluent_kafka import Producer as CProducer

    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    delivered = 0
    failures: list[str] = []
    stats: dict = {}

    def on_delivery(err, msg) -> None:
        nonlocal delivered
        if err is not None:
            failures.append(f"{msg.value().decode()}: {err.name()}")
            return
        delivered += 1
        if delivered == 1:
            print("DELIVERED 1", flush=True)

    def on_stats(doc: str) -> None:
        stats.update(json.loads(doc))

    p = CProducer({**settings(args), "bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True,
                   "linger.ms": 5, "message.timeout.ms": int(args.timeout * 1000), "log_level": 3,
                   "statistics.interval.ms": 1000, "stats_cb": on_stats})
    t0 = time.monotonic()
    n = 0
    while not stop.is_set() and time.monotonic() - t0 < args.duration:
        due = t0 + n / args.rate
        while (wait := due - time.monotonic()) > 0 and not stop.is_set():
            p.poll(wait)  # serves delivery reports; returns early when it served one
        try:
            p.produce(args.topic, f"{args.prefix}-{n}".encode(), on_delivery=on_delivery)
            n += 1
        except BufferError:
            p.poll(0.1)
    left = p.flush(args.timeout + 10)
    p.poll(1.5)  # one more statistics callback, with the last requests counted
    brokers = stats.get("brokers", {}).values()
    return {"produced": n, "delivered": delivered, "failed": len(failures) + left, "failures": failures[:10],
            "retries": sum(b.get("txretries", 0) for b in brokers),
            "transport_errors": sum(b.get("txerrs", 0) + b.get("rxerrs", 0) for b in brokers),
            "request_timeouts": sum(b.get("req_timeouts", 0) for b in brokers),
            "seconds": round(time.monotonic() - t0, 1)}


def count(args: argparse.Namespace) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({**settings(args), "bootstrap.servers": args.bootstrap, "group.id": f"probe-{time.time_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 3})
    deadline = time.monotonic() + args.timeout
    parts: list[int] = []
    while not parts and time.monotonic() < deadline:
        md = c.list_topics(args.topic, timeout=5).topics.get(args.topic)
        if md is not None and md.error is None and md.partitions:
            parts = sorted(md.partitions)
        else:
            time.sleep(1)
    if parts:
        c.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in parts])
    prefix = args.prefix + "-"
    seen = 0
    where: dict[str, list[tuple[int, int]]] = {}  # value -> (partition, offset) of each copy
    while parts and len(where) < args.expect and time.monotonic() < deadline:
        for msg in c.consume(1000, timeout=1.0):
            if msg.error() is not None:
                continue
            value = (msg.value() or b"").decode(errors="replace")
            if value.startswith(prefix):
                seen += 1
                where.setdefault(value, []).append((msg.partition(), msg.offset()))
    c.close()
    missing = [f"{prefix}{i}" for i in range(args.expect) if f"{prefix}{i}" not in where][:5]
    duplicated = {v: at for v, at in where.items() if len(at) > 1}
    return {"partitions": len(parts), "seen": seen, "distinct": len(where),
            "duplicates": seen - len(where), "missing_sample": missing,
            "duplicate_sample": dict(list(duplicated.items())[:5])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["produce", "stream", "count", "denied"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--prefix", default="probe")
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--expect", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--audited", action="store_true")
    ap.add_argument("--datacenter", default="live")
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--config", default="", help="librdkafka client properties file (SASL_SSL)")
    ap.add_argument("--duration", type=float, default=600.0)
    args = ap.parse_args()
    result = {"produce": produce, "stream": stream, "count": count, "denied": denied}[args.mode](args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
