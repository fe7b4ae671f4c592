"""ferry drivers: confluent-kafka (librdkafka) producer and consumer, and a message-set producer.

- `produce_librdkafka`: the client any app team would use. batch = messages per produce request,
  set with `batch.num.messages` (librdkafka's cap on one MessageSet) and `linger.ms`; one partition, so
  one MessageSet per request. acks=1 (the broker answers after the append, before fsync), no
  idempotence, no compression, asynchronous with many requests in flight (the paper's producer did
  not even wait for acks). Success is checked at the end: the partition's high watermark must grow by
  exactly the count (no per-message delivery callbacks in the timed loop).
- the message-set producer lives in lean_producer.py.
- `consume_librdkafka`: assign partition 0 from the beginning and read everything back with
  `consume(num_messages=...)`; max.partition.fetch.bytes ~200 KB as in the paper (~1000 messages per
  pull). Every message's value is touched (its length summed).
"""

from __future__ import annotations

import time

import window
from common import MESSAGE_SIZE, payloads, rate

PARTITION = 0


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
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
        hw = watermarks(bootstrap, topic)[1]
        if hw >= target:
            return hw
        time.sleep(0.1)
    return hw


def produce_librdkafka(bootstrap: str, topic: str, messages: int, batch: int, time_limit_s: float,
                       acks: str = "1", compression: str = "none", use_batch_api: bool = True) -> dict:
    from confluent_kafka import KafkaException, Producer

    start_hw = watermarks(bootstrap, topic)[1]
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
    batched = use_batch_api and batch > 1
    if batched:
        # produce_batch(): one call hands librdkafka a whole message set (the paper's send(messageSet));
        # the dicts are made once, outside the timed loop
        sets = [[{"value": values[(i + j) % pool]} for j in range(batch)] for i in range(0, pool, batch)]
    deadline = time.monotonic() + time_limit_s
    window.begin()
    t0 = time.perf_counter()
    sent = 0
    k = 0
    while sent < messages:
        if time.monotonic() > deadline:
            break
        try:
            if batched:
                chunk = sets[k % len(sets)]
                if messages - sent < batch:
                    chunk = chunk[:messages - sent]
                queued = p.produce_batch(topic, chunk, partition=PARTITION)
                sent += queued
                k += 1
                # librdkafka's queue is full (the client outran the broker): the messages it refused carry
                # an "_error" key; serve delivery reports until there is room and queue those again
                rest = [m for m in chunk if m.pop("_error", None) is not None] if queued < len(chunk) else []
                while rest and time.monotonic() <= deadline:
                    p.poll(0.001)
                    sent += p.produce_batch(topic, rest, partition=PARTITION)
                    rest = [m for m in rest if m.pop("_error", None) is not None]
                if rest:
                    errors.append(f"produce_batch: {len(rest)} of {len(chunk)} still refused at the time limit")
                    break
            else:
                produce(topic, values[sent % pool], partition=PARTITION)
                sent += 1
        except BufferError:
            p.poll(0.001)
        except KafkaException as e:
            errors.append(str(e))
            break
        if sent & 0xFFFF < batch:
            p.poll(0)
    remaining = p.flush(max(1.0, deadline - time.monotonic()))
    seconds = time.perf_counter() - t0
    window.end()
    hw = wait_high_watermark(bootstrap, topic, start_hw + sent, timeout_s=10)
    stored = hw - start_hw
    ok = sent == messages and remaining == 0 and stored == messages
    return {"messages": stored, "sent": sent, "seconds": seconds, "msgs_per_s": rate(stored, seconds),
            "ok": ok, "errors": errors[:5], "client": "confluent-kafka (librdkafka)",
            "settings": f"{'produce_batch() of ' + str(batch) if batched else 'produce()'}, acks={acks}, "
                        f"batch.num.messages={batch}, linger.ms={conf['linger.ms']}, compression={compression}"}


def leader_address(bootstrap: str, topic: str, partition: int) -> tuple[str, int]:
    """host and port of the partition's leader, from the cluster's metadata."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic=topic, timeout=10)
    leader = md.topics[topic].partitions[partition].leader
    broker = md.brokers[leader]
    return broker.host, broker.port


def consume_librdkafka(bootstrap: str, topic: str, messages: int, time_limit_s: float,
                       fetch_bytes: int = 204_800) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

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
            # C-level iteration (map) instead of a Python loop per message: the client shares 2 cores
            # with the broker. Every value is still materialised and its length counted.
            if any(map(Message.error, batch)):
                bad = [m for m in batch if m.error()]
                errors.extend(str(m.error()) for m in bad[:5])
                batch = [m for m in batch if not m.error()]
            got += len(batch)
            nbytes += sum(map(len, map(Message.value, batch)))
        seconds = time.perf_counter() - t0 if t0 else 0.0
        window.end()
    finally:
        c.close()
    return {"messages": got, "seconds": seconds, "msgs_per_s": rate(got, seconds), "bytes": nbytes,
            "ok": got == messages and nbytes == messages * MESSAGE_SIZE, "errors": errors[:5],
            "client": "confluent-kafka (librdkafka)",
            "settings": f"assign() from the beginning, max.partition.fetch.bytes={fetch_bytes}"}
