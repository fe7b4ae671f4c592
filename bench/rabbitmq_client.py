"""RabbitMQ drivers over pika 1.x (the reference Python AMQP 0-9-1 client).

Messages are persistent (delivery_mode=2) on a durable classic queue, published to the default
exchange: the closest thing to a log on disk, and what makes "bytes on disk" comparable.

- batch 1: BlockingConnection, publisher confirms OFF: one basic.publish frame per message, nothing
  waited for (the paper's asynchronous producer). The end is marked by a passive queue.declare whose
  message count covers every earlier publish on the channel (AMQP orders them).
- batch N (50): publisher confirms ON, the client publishes N messages and waits for the broker's
  confirms of all N before the next N (AMQP 0-9-1 has no message sets: a confirm per N publishes is
  its acknowledged batch). Uses pika's SelectConnection so the N publishes are not serialised.
- consume: basic.consume with prefetch 1000 (the paper's ~1000 messages per pull), manual acks,
  one cumulative ack (multiple=True) per 500 messages.
"""

from __future__ import annotations

import time

import pika
import window
from common import MESSAGE_SIZE, payloads, rate
from pika.adapters.select_connection import SelectConnection

PREFETCH = 1000
ACK_EVERY = 500


def _params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(host="127.0.0.1", port=port, heartbeat=0, blocked_connection_timeout=120)


def queue_depth(port: int, queue: str) -> int:
    conn = pika.BlockingConnection(_params(port))
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


def produce(port: int, queue: str, messages: int, batch: int, time_limit_s: float) -> dict:
    start_depth = queue_depth(port, queue)
    if batch == 1:
        sent, seconds, errors = _produce_async(port, queue, messages, time_limit_s)
        settings = "persistent, durable queue, confirms off (one frame per message, nothing awaited)"
    else:
        sent, seconds, errors = _produce_confirmed(port, queue, messages, batch, time_limit_s)
        settings = f"persistent, durable queue, publisher confirms awaited every {batch} publishes"
    stored = queue_depth(port, queue) - start_depth
    return {"messages": stored, "sent": sent, "seconds": seconds, "msgs_per_s": rate(stored, seconds),
            "ok": stored == messages and not errors, "errors": errors[:5], "client": f"pika {pika.__version__}",
            "settings": settings}


def _produce_async(port: int, queue: str, messages: int, time_limit_s: float) -> tuple[int, float, list[str]]:
    values = payloads()
    pool = len(values)
    props = pika.BasicProperties(delivery_mode=2)
    conn = pika.BlockingConnection(_params(port))
    try:
        ch = conn.channel()
        publish = ch.basic_publish
        deadline = time.monotonic() + time_limit_s
        window.begin()
        t0 = time.perf_counter()
        sent = 0
        while sent < messages:
            publish("", queue, values[sent % pool], props)
            sent += 1
            if sent & 0x3FF == 0 and time.monotonic() > deadline:
                break
        # the answer comes after every earlier publish on this channel reached the queue
        ch.queue_declare(queue, passive=True)
        seconds = time.perf_counter() - t0
        window.end()
    finally:
        conn.close()
    return sent, seconds, []


def _produce_confirmed(port: int, queue: str, messages: int, batch: int,
                       time_limit_s: float) -> tuple[int, float, list[str]]:
    values = payloads()
    pool = len(values)
    props = pika.BasicProperties(delivery_mode=2)
    st = {"sent": 0, "acked": 0, "nacked": 0, "t0": 0.0, "t1": 0.0, "errors": []}

    def burst(ch) -> None:
        n = min(batch, messages - st["sent"])
        for _ in range(n):
            ch.basic_publish("", queue, values[st["sent"] % pool], props)
            st["sent"] += 1

    def on_confirm(frame) -> None:
        m = frame.method
        if isinstance(m, pika.spec.Basic.Nack):
            st["nacked"] += 1
        st["acked"] = m.delivery_tag if m.multiple else max(st["acked"], m.delivery_tag)
        if st["acked"] >= messages:
            st["t1"] = time.perf_counter()
            window.end()
            conn.close()
        elif st["acked"] == st["sent"]:
            burst(st["ch"])

    def on_channel(ch) -> None:
        st["ch"] = ch

        def start(_frame) -> None:
            window.begin()
            st["t0"] = time.perf_counter()
            burst(ch)

        ch.confirm_delivery(on_confirm, callback=start)

    def give_up() -> None:
        st["errors"].append(f"time limit {time_limit_s}s reached after {st['acked']} confirms")
        st["t1"] = time.perf_counter()
        conn.close()

    def on_close(c, reason) -> None:
        if not st["t1"]:
            st["errors"].append(f"connection closed: {reason}")
        c.ioloop.stop()

    conn = SelectConnection(_params(port), on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                            on_open_error_callback=lambda c, e: (st["errors"].append(str(e)), c.ioloop.stop()),
                            on_close_callback=on_close)
    conn.ioloop.call_later(time_limit_s, give_up)
    conn.ioloop.start()
    if st["nacked"]:
        st["errors"].append(f"{st['nacked']} nacks")
    return st["sent"], (st["t1"] or time.perf_counter()) - (st["t0"] or time.perf_counter()), st["errors"]


def consume(port: int, queue: str, messages: int, time_limit_s: float) -> dict:
    conn = pika.BlockingConnection(_params(port))
    st = {"got": 0, "bytes": 0, "t0": 0.0}
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=PREFETCH)

        def on_message(ch, method, _props, body) -> None:
            if not st["got"]:
                window.begin()
                st["t0"] = time.perf_counter()
            st["got"] += 1
            st["bytes"] += len(body)
            if st["got"] % ACK_EVERY == 0 or st["got"] == messages:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if st["got"] == messages:
                st["t1"] = time.perf_counter()
                window.end()

        ch.basic_consume(queue, on_message, auto_ack=False)
        deadline = time.monotonic() + time_limit_s
        while st["got"] < messages and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.5)
        seconds = (st.get("t1") or time.perf_counter()) - st["t0"] if st["t0"] else 0.0
    finally:
        conn.close()
    got = st["got"]
    return {"messages": got, "seconds": seconds, "msgs_per_s": rate(got, seconds), "bytes": st["bytes"],
            "ok": got == messages and st["bytes"] == messages * MESSAGE_SIZE, "errors": [],
            "client": f"pika {pika.__version__}",
            "settings": f"basic.consume, prefetch {PREFETCH}, cumulative ack every {ACK_EVERY}"}
