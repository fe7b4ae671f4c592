"""End-to-end drivers: a producer in the live cluster stamping each message with its send time, and a
consumer of the offline cluster (behind the mirror) measuring how long each message took.

The first 8 bytes of every 200-byte message are the producer's `time.time_ns()` (same machine, same
clock); the rest is random. Latency = receive time - send time, through: producer batching, live
broker (append, flush, high watermark), mirror (fetch, produce with acks=all), offline broker (append,
fsync), consumer fetch.
"""

from __future__ import annotations

import struct
import time

import window
from common import MESSAGE_SIZE, payloads, rate

_TS = struct.Struct(">q")
PARTITION = 0


def produce_timestamped(bootstrap: str, topic: str, messages: int, per_second: float, time_limit_s: float) -> dict:
    """Send `messages` (at most `per_second` a second; 0 = as fast as possible), acks=1, batches <= 50."""
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False,
                  "batch.num.messages": 50, "linger.ms": 1, "queue.buffering.max.messages": 1_000_000,
                  "socket.nagle.disable": True, "error_cb": lambda e: errors.append(str(e))})
    tails = [v[_TS.size:] for v in payloads()]
    pool = len(tails)
    deadline = time.monotonic() + time_limit_s
    window.begin()
    t0 = time.perf_counter()
    sent = 0
    tick = 0.001  # pace in 1 ms steps
    while sent < messages and time.monotonic() < deadline:
        if per_second:
            due = min(messages, int((time.perf_counter() - t0) * per_second) + 1)
            if sent >= due:
                time.sleep(tick)
                continue
        else:
            due = messages
        while sent < due:
            try:
                p.produce(topic, _TS.pack(time.time_ns()) + tails[sent % pool], partition=PARTITION)
                sent += 1
            except BufferError:
                p.poll(0.001)
        p.poll(0)
    left = p.flush(max(1.0, deadline - time.monotonic()))
    seconds = time.perf_counter() - t0
    window.end()
    return {"messages": sent, "seconds": seconds, "msgs_per_s": rate(sent, seconds),
            "ok": sent == messages and left == 0, "errors": errors[:5],
            "settings": f"acks=1, batch.num.messages=50, linger.ms=1, target rate {per_second or 'max'}/s"}


def consume_latency(bootstrap: str, topic: str, messages: int, time_limit_s: float) -> dict:
    """Read `messages` from the offline cluster (waiting for the mirror to create the topic)."""
    import numpy as np
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-e2e", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10, "enable.partition.eof": False,
                  "topic.metadata.refresh.interval.ms": 500})
    lat = np.zeros(messages, dtype=np.int64)
    got = 0
    errors: list[str] = []
    first_send = last_recv = 0
    deadline = time.monotonic() + time_limit_s
    try:
        c.assign([TopicPartition(topic, PARTITION, OFFSET_BEGINNING)])
        window.begin()
        while got < messages and time.monotonic() < deadline:
            # librdkafka's consume() returns when num_messages arrived *or* the timeout ran out: a 200 ms
            # timeout put 0-200 ms of waiting-for-a-full-batch into every paced latency; 1 ms does not
            for m in c.consume(num_messages=10_000, timeout=0.001):
                now = time.time_ns()
                if m.error():
                    # the topic appears on the offline cluster only when the mirror creates it
                    if "UNKNOWN_TOPIC" not in str(m.error()) and "Unknown topic" not in str(m.error()):
                        errors.append(str(m.error()))
                    continue
                v = m.value()
                if len(v) != MESSAGE_SIZE or got >= messages:
                    continue
                sent_ns = _TS.unpack_from(v)[0]
                if not first_send:
                    first_send = sent_ns
                lat[got] = now - sent_ns
                last_recv = now
                got += 1
        window.end()
    finally:
        c.close()
    lat = lat[:got] / 1e6  # ms
    seconds = (last_recv - first_send) / 1e9 if got else 0.0
    pct = (lambda q: round(float(np.percentile(lat, q)), 2)) if got else (lambda q: None)
    return {"messages": got, "seconds": seconds, "msgs_per_s": rate(got, seconds),
            "latency_ms": {"p50": pct(50), "p90": pct(90), "p99": pct(99), "max": pct(100)},
            "ok": got == messages, "errors": errors[:5],
            "settings": "assign() from the beginning on the offline cluster; seconds = first send to last receive"}
