"""ferry drivers: confluent-kafka (librdkafka) producer and consumer, and a message-set producer.

- `produce_librdkafka`: the client any app team would use. batch = messages per produce request,
  set with `batch.num.messages` (librdkafka's cap on one MessageSet) and `linger.ms`; one partition, so
  one MessageSet per request. acks=1 (the broker answers after the append, before fsync), no
  idempotence, no compression, asynchronous with many requests in flight (the paper's producer did
  not even wait for acks). Success is checked at the end: the partition's high watermark must grow by
  exactly the count (no per-message delivery callbacks in the timed loop).
- `produce_message_sets`: the paper's `send(messageSet)`: this process encodes RecordBatch v2 sets of
  `batch` messages (record_set.py) and pipelines Produce v8 requests (acks=1) over ferry's wire client
  with a bounded window of requests in flight. It shows what the broker takes when the client is
  cheap; encoding is inside the timed loop.
- `consume_librdkafka`: assign partition 0 from the beginning and read everything back with
  `consume(num_messages=...)`; max.partition.fetch.bytes ~200 KB as in the paper (~1000 messages per
  pull). Every message's value is touched (its length summed).
"""

from __future__ import annotations

import time

import window
from common import MESSAGE_SIZE, payloads, rate
from record_set import MessageSetBuilder

PARTITION = 0


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks", "enable.auto.commit": False})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, PARTITION), timeout=10, cached=False)
    finally:
        c.close()


def wait_high_watermark(bootstrap: str, topic: str, target: int, timeout_s: float = 30.0) -> int:
    """The high watermark once it reaches `target` (consumers see only flushed data: wait for the flush)."""
    deadline = time.monotonic() + timeout_s
    hw = -1
    while time.monotonic() < deadline:
        hw = _watermarks(bootstrap, topic)[1]
        if hw >= target:
            return hw
        time.sleep(0.1)
    return hw


def produce_librdkafka(bootstrap: str, topic: str, messages: int, batch: int, time_limit_s: float,
                       acks: str = "1", compression: str = "none") -> dict:
    from confluent_kafka import KafkaException, Producer

    start_hw = _watermarks(bootstrap, topic)[1]
    errors: list[str] = []
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": False,
        "compression.type": compression,
        "batch.num.messages": batch,
        "linger.ms": 0 if batch == 1 else 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "max.in.flight.requests.per.connection": 1_000,
        "socket.nagle.disable": True,
        "error_cb": lambda err: errors.append(str(err)),
    }
    p = Producer(conf)
    values = payloads()
    pool = len(values)
    produce = p.produce
    deadline = time.monotonic() + time_limit_s
    window.begin()
    t0 = time.perf_counter()
    sent = 0
    while sent < messages:
        if time.monotonic() > deadline:
            break
        try:
            produce(topic, values[sent % pool], partition=PARTITION)
            sent += 1
        except BufferError:
            p.poll(0.001)
        except KafkaException as e:
            errors.append(str(e))
            break
        if sent & 0xFFFF == 0:
            p.poll(0)
    remaining = p.flush(max(1.0, deadline - time.monotonic()))
    seconds = time.perf_counter() - t0
    window.end()
    hw = wait_high_watermark(bootstrap, topic, start_hw + sent, timeout_s=10)
    stored = hw - start_hw
    ok = sent == messages and remaining == 0 and stored == messages
    return {"messages": stored, "sent": sent, "seconds": seconds, "msgs_per_s": rate(stored, seconds),
            "ok": ok, "errors": errors[:5], "client": "confluent-kafka (librdkafka)",
            "settings": f"acks={acks}, batch.num.messages={batch}, linger.ms={conf['linger.ms']}, "
                        f"compression={compression}"}


def _produce_errors(body: memoryview) -> list[int]:
    """Error codes of a Produce v8 response (one topic, any partitions)."""
    from broker.client.raw_responses import parse_produce

    return [r.error_code for parts in parse_produce(body, 8).values() for r in parts]


def produce_message_sets(bootstrap: str, topic: str, messages: int, batch: int, time_limit_s: float,
                         acks: int = 1, in_flight: int = 64) -> dict:
    from broker.client.raw_requests import produce_request
    from broker.client.wire_client import WireClient

    start_hw = _watermarks(bootstrap, topic)[1]
    client = WireClient(bootstrap, client_id="bench-message-sets", timeout_s=60.0)
    errors: list[str] = []
    try:
        client.refresh_metadata([topic])
        leader = client.leader(topic, PARTITION)
        if leader is None:
            raise RuntimeError(f"no leader for {topic}-{PARTITION}")
        conn = client.connection(leader)
        builder = MessageSetBuilder(MESSAGE_SIZE)
        values = payloads()
        pool = len(values)
        deadline = time.monotonic() + time_limit_s
        window.begin()
        t0 = time.perf_counter()
        sent = 0
        bad = 0
        while sent < messages and time.monotonic() < deadline:
            n = min(batch, messages - sent)
            i = sent % pool
            chunk = values[i:i + n] if i + n <= pool else (values + values)[i:i + n]
            records = builder.build(chunk)
            api, version, body = produce_request([(topic, [(PARTITION, records)])], acks, 30_000)
            conn.send(api, version, body)
            sent += n
            if acks != 0 and conn.in_flight >= in_flight:
                codes = _produce_errors(conn.receive())
                bad += sum(1 for c in codes if c)
        while acks != 0 and conn.in_flight:
            bad += sum(1 for c in _produce_errors(conn.receive()) if c)
        seconds = time.perf_counter() - t0
        window.end()
        if bad:
            errors.append(f"{bad} produce requests answered with an error")
    finally:
        client.close()
    hw = wait_high_watermark(bootstrap, topic, start_hw + sent, timeout_s=10)
    stored = hw - start_hw
    return {"messages": stored, "sent": sent, "seconds": seconds, "msgs_per_s": rate(stored, seconds),
            "ok": stored == messages and not errors, "errors": errors,
            "client": "message sets (RecordBatch v2 built in Python, ferry wire client)",
            "settings": f"acks={acks}, {batch} messages per request, {in_flight} requests in flight"}


def consume_librdkafka(bootstrap: str, topic: str, messages: int, time_limit_s: float,
                       fetch_bytes: int = 204_800) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "bench-consumer",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "max.partition.fetch.bytes": fetch_bytes,
        "fetch.max.bytes": max(fetch_bytes, 1_048_576),
        "fetch.wait.max.ms": 100,
        "queued.max.messages.kbytes": 65_536,
        "check.crcs": False,
        "enable.partition.eof": False,
    })
    errors: list[str] = []
    got = nbytes = 0
    try:
        c.assign([TopicPartition(topic, PARTITION, OFFSET_BEGINNING)])
        deadline = time.monotonic() + time_limit_s
        # the first message marks the start: connection setup and metadata are not consumption
        t0 = None
        while got < messages and time.monotonic() < deadline:
            batch = c.consume(num_messages=10_000, timeout=1.0)
            if t0 is None and batch:
                window.begin()
                t0 = time.perf_counter()
            for m in batch:
                if m.error():
                    errors.append(str(m.error()))
                    continue
                got += 1
                nbytes += len(m.value())
        seconds = time.perf_counter() - t0 if t0 else 0.0
        window.end()
    finally:
        c.close()
    return {"messages": got, "seconds": seconds, "msgs_per_s": rate(got, seconds), "bytes": nbytes,
            "ok": got == messages and nbytes == messages * MESSAGE_SIZE, "errors": errors[:5],
            "client": "confluent-kafka (librdkafka)",
            "settings": f"assign() from the beginning, max.partition.fetch.bytes={fetch_bytes}"}
