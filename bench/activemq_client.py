"""ActiveMQ drivers over stomp.py (STOMP 1.2).

Why STOMP: Debian's ActiveMQ 5.17 is built without the AMQP 1.0 module, OpenWire has no maintained
Python client, and stomp.py is the usual Python client for ActiveMQ.

Messages are persistent (`persistent:true`, stored in KahaDB) on one queue.

- batch 1: one SEND frame per message, no receipt (nothing awaited: the paper's asynchronous
  producer). The last message asks for a receipt; the broker answers it after every earlier frame
  of the connection was processed, which marks the end.
- batch N (50): every N-th SEND asks for a receipt and the client waits for it before the next N
  (STOMP has no message sets: a receipt per N sends is its acknowledged batch, like RabbitMQ's
  confirms).
- consume: SUBSCRIBE with ack=auto and `activemq.prefetchSize:1000` (the paper's ~1000 messages per
  pull). ack=client (cumulative) slows ActiveMQ's STOMP dispatch to a few hundred messages/s here
  once thousands are outstanding, so the cheaper auto mode is measured.
"""

from __future__ import annotations

import socket
import threading
import time

import stomp
import window
from common import MESSAGE_SIZE, payloads, rate

PREFETCH = 1000


class _Receipts(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.seen: set[str] = set()
        self.errors: list[str] = []

    def on_receipt(self, frame) -> None:
        with self.cond:
            self.seen.add(frame.headers.get("receipt-id", ""))
            self.cond.notify_all()

    def on_error(self, frame) -> None:
        with self.cond:
            self.errors.append(frame.body if isinstance(frame.body, str) else repr(frame.body)[:200])
            self.cond.notify_all()

    def wait(self, receipt: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while receipt not in self.seen:
                left = deadline - time.monotonic()
                if left <= 0 or self.errors:
                    return False
                self.cond.wait(left)
            self.seen.discard(receipt)
            return True


def _connect(port: int, **kwargs) -> stomp.Connection12:
    conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0), **kwargs)
    conn.connect(wait=True)
    # stomp.py leaves Nagle on: a receipt round trip would then wait for the peer's delayed ACK (~40 ms)
    conn.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def produce(port: int, queue: str, messages: int, batch: int, time_limit_s: float) -> dict:
    values = payloads()
    pool = len(values)
    dest = f"/queue/{queue}"
    conn = _connect(port)
    receipts = _Receipts()
    conn.set_listener("receipts", receipts)
    errors: list[str] = []
    plain = {"persistent": "true"}
    try:
        deadline = time.monotonic() + time_limit_s
        window.begin()
        t0 = time.perf_counter()
        sent = 0
        send = conn.send
        while sent < messages:
            last_of_batch = (sent + 1) % batch == 0 or sent + 1 == messages
            if last_of_batch:
                rid = f"r{sent}"
                send(dest, values[sent % pool], headers={"persistent": "true", "receipt": rid})
                sent += 1
                if (batch > 1 or sent == messages) and not receipts.wait(rid, max(1.0, deadline - time.monotonic())):
                    errors.append(f"no receipt for message {sent} (broker errors: {receipts.errors[:2]})")
                    break
            else:
                send(dest, values[sent % pool], headers=plain)
                sent += 1
            if time.monotonic() > deadline:
                errors.append(f"time limit {time_limit_s}s reached")
                break
        seconds = time.perf_counter() - t0
        window.end()
        if receipts.errors:
            errors.append(f"broker ERROR frames: {receipts.errors[:2]}")
    finally:
        conn.disconnect()
    mode = "no receipts (one frame per message, nothing awaited)" if batch == 1 else \
        f"a receipt awaited every {batch} sends"
    return {"messages": sent if not errors else 0, "sent": sent, "seconds": seconds,
            "msgs_per_s": rate(sent, seconds) if not errors else 0.0,
            "ok": sent == messages and not errors, "errors": errors[:5],
            "client": f"stomp.py {stomp.__version__} (STOMP 1.2)",
            "settings": f"persistent:true, {mode}"}


class _Counter(stomp.ConnectionListener):
    def __init__(self, target: int) -> None:
        self.target = target
        self.got = 0
        self.bytes = 0
        self.t0 = 0.0
        self.t1 = 0.0
        self.done = threading.Event()

    def on_message(self, frame) -> None:
        if not self.got:
            window.begin()
            self.t0 = time.perf_counter()
        self.got += 1
        self.bytes += len(frame.body)
        if self.got == self.target:
            self.t1 = time.perf_counter()
            window.end()
            self.done.set()


def consume(port: int, queue: str, messages: int, time_limit_s: float) -> dict:
    conn = _connect(port, auto_decode=False)
    counter = _Counter(messages)
    conn.set_listener("count", counter)
    try:
        conn.subscribe(f"/queue/{queue}", id="bench", ack="auto",
                       headers={"activemq.prefetchSize": str(PREFETCH)})
        counter.done.wait(time_limit_s)
        seconds = (counter.t1 or time.perf_counter()) - counter.t0 if counter.t0 else 0.0
        got, nbytes = counter.got, counter.bytes
    finally:
        conn.disconnect()
    return {"messages": got, "seconds": seconds, "msgs_per_s": rate(got, seconds), "bytes": nbytes,
            "ok": got == messages and nbytes == messages * MESSAGE_SIZE, "errors": [],
            "client": f"stomp.py {stomp.__version__} (STOMP 1.2)",
            "settings": f"SUBSCRIBE ack=auto, activemq.prefetchSize={PREFETCH}"}
