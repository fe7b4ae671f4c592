"""The soak's frontend (bench/soak.py): one audited, idempotent acks=all producer of the demo's Avro events at
a steady rate, its own process so that its memory is sampled like every other process of the pipeline.

Time runs 60 times faster for event times than for the clock: real minute k of the soak (counted from
``--t0``) produces events of the hour ``--base-hour-ms + k h``, each minute's second s at minute s of that
hour. So a 30-minute soak fills 30 event hours, each closed a minute after it opened, and the books judge
every one of them. Every acknowledgement is appended to ``--acked`` as "topic hour_ms guid" (the ground
truth the soak checks the warehouse against); SIGTERM stops production, flushes, publishes the last audit
counts and writes a JSON summary to ``--acked``.json.

    .venv/bin/python bench/soak_producer.py --zookeeper 127.0.0.1:2181/ferry/live --rate 100 \
        --t0 EPOCH_S --base-hour-ms MS --acked FILE
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
from pathlib import Path

from ferry.client.producer import Producer
from ferry.schemas.events import sample
from ferry.schemas.registry import SchemaRegistry, subject_for_topic
from ferry.schemas.wire import AvroSerializer

HOUR_MS = 3_600_000
MIX = (("page_view", 0.7), ("click", 0.2), ("search", 0.1))


def event_time(t0: float, base_hour_ms: int, now: float) -> int:
    """Real minute k after t0 -> event hour base + k; second s of the minute -> minute s of the hour."""
    rel = max(now - t0, 0.0)
    minute, within = divmod(rel, 60.0)
    return base_hour_ms + int(minute) * HOUR_MS + int(within * 60_000)


class AckLog:
    """Acknowledged events, one line each, written from librdkafka's delivery callbacks."""

    def __init__(self, path: Path) -> None:
        self._out = path.open("a", buffering=1 << 16)
        self._lock = threading.Lock()
        self.acked = 0
        self.failed = 0
        self.first_error = ""

    def on_delivery(self, topic: str, hour_ms: int, guid: str):
        def done(err, _msg) -> None:
            with self._lock:
                if err is None:
                    self.acked += 1
                    self._out.write(f"{topic} {hour_ms} {guid}\n")
                else:
                    self.failed += 1
                    self.first_error = self.first_error or str(err)
        return done

    def close(self) -> None:
        with self._lock:
            self._out.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zookeeper", required=True)
    p.add_argument("--rate", type=float, default=100.0, help="events per second (default 100)")
    p.add_argument("--t0", type=float, required=True, help="the soak's start (epoch seconds)")
    p.add_argument("--base-hour-ms", type=int, required=True, help="the event hour of the soak's first minute")
    p.add_argument("--acked", type=Path, required=True)
    p.add_argument("--seed", type=int, default=2011)
    args = p.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rng = random.Random(args.seed)
    acks = AckLog(args.acked)
    sent = 0
    with SchemaRegistry(args.zookeeper) as reg:
        serializers = {t: AvroSerializer(reg, subject_for_topic(t)) for t, _ in MIX}
    producer = Producer(zookeeper=args.zookeeper, application="soak-frontend", audit_interval_s=2.0,
                        delivery_timeout_ms=300_000)
    topics, weights = [t for t, _ in MIX], [w for _, w in MIX]
    start = time.time()
    try:
        while not stop.is_set():
            due = int((time.time() - start) * args.rate)
            while sent < due and not stop.is_set():
                topic = rng.choices(topics, weights)[0]
                ts = event_time(args.t0, args.base_hour_ms, time.time())
                record = sample(topic, rng, ts, host="fe-soak-01")
                producer.send(topic, serializers[topic](record), timestamp_ms=ts,
                              on_delivery=acks.on_delivery(topic, ts // HOUR_MS * HOUR_MS, record["guid"]))
                sent += 1
            stop.wait(0.05)
    finally:
        undelivered = producer.close(timeout=300)
        acks.close()
    summary = {"sent": sent, "acked": acks.acked, "failed": acks.failed, "undelivered": undelivered,
               "first_error": acks.first_error, "seconds": round(time.time() - start, 1)}
    Path(f"{args.acked}.json").write_text(json.dumps(summary))
    print(json.dumps(summary), flush=True)
    return 0 if acks.failed == 0 and undelivered == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
