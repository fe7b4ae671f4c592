"""A lean pipelined Produce client for one partition: the paper's `send(messageSet)` with nothing else.

On two shared cores every microsecond the client spends is taken from the broker, so this client does
per request only: encode the message set (record_set.py), pack a precomputed request template with the
correlation id and sizes, one `sendmsg`; answers are read in bulk (`recv_into` a large buffer) and
checked frame by frame: correlation id in order, partition error code 0. Produce v8 with acks=1 (or -1).
"""

from __future__ import annotations

import socket
import struct
import time

import window
from common import MESSAGE_SIZE, payloads, rate
from record_set import MessageSetBuilder

PRODUCE, VERSION = 0, 8
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_RESP = struct.Struct(">ii")  # size, correlation_id


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class LeanProducer:
    def __init__(self, host: str, port: int, topic: str, partition: int, acks: int = 1,
                 client_id: str = "bench-lean", timeout_s: float = 60.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        # everything between the correlation id and the record bytes, fixed for this partition
        self.middle = (_string(client_id) + b"\xff\xff" + struct.pack(">hi", acks, 30_000) + _I32.pack(1)
                       + _string(topic) + _I32.pack(1) + _I32.pack(partition))
        self.corr = 0
        self.expected = 0  # next correlation id whose answer we wait for
        self.errors = 0
        self._rbuf = bytearray(1 << 20)
        self._rview = memoryview(self._rbuf)
        self._rlen = 0
        # the error code sits after: correlation id, topics count, topic name, partitions count, partition
        self._err_at = 4 + 4 + 2 + len(topic.encode()) + 4 + 4

    @property
    def in_flight(self) -> int:
        return self.corr - self.expected

    def send(self, records: bytes) -> None:
        size = 8 + len(self.middle) + 4 + len(records)
        head = _HEAD.pack(size, PRODUCE, VERSION, self.corr) + self.middle + _I32.pack(len(records))
        self.corr += 1
        data = [head, records]
        total = len(head) + len(records)
        sent = self.sock.sendmsg(data)
        if sent < total:
            self.sock.sendall((head + records)[sent:])

    def receive(self, at_least: int = 1) -> int:
        """Read answers until at least `at_least` more arrived; returns how many were consumed."""
        done = 0
        view = self._rview
        while True:
            pos = 0
            n = self._rlen
            while n - pos >= 4:
                size = _I32.unpack_from(self._rbuf, pos)[0]
                if n - pos - 4 < size:
                    break
                corr = _I32.unpack_from(self._rbuf, pos + 4)[0]
                if corr != self.expected:
                    raise ConnectionError(f"answer {corr} out of order (expected {self.expected})")
                if self._rbuf[pos + self._err_at: pos + self._err_at + 2] != b"\x00\x00":
                    self.errors += 1
                self.expected += 1
                done += 1
                pos += 4 + size
            if pos:
                view[: n - pos] = view[pos:n]
                self._rlen = n - pos
            if done >= at_least:
                return done
            if self._rlen == len(self._rbuf):
                raise ConnectionError("answer larger than the receive buffer")
            k = self.sock.recv_into(view[self._rlen:])
            if k == 0:
                raise ConnectionError("broker closed the connection")
            self._rlen += k

    def close(self) -> None:
        self.sock.close()


def produce(bootstrap: str, topic: str, partition: int, messages: int, batch: int, time_limit_s: float,
            acks: int = 1, in_flight: int = 128) -> dict:
    """Send `messages` in sets of `batch`, at most `in_flight` requests unanswered."""
    from ferry_client import leader_address, wait_high_watermark, watermarks

    start_hw = watermarks(bootstrap, topic)[1]
    host, port = leader_address(bootstrap, topic, partition)
    p = LeanProducer(host, port, topic, partition, acks)
    builder = MessageSetBuilder(MESSAGE_SIZE)
    values = payloads()
    pool = len(values)
    doubled = values + values
    errors: list[str] = []
    try:
        deadline = time.monotonic() + time_limit_s
        window.begin()
        t0 = time.perf_counter()
        sent = 0
        while sent < messages:
            n = min(batch, messages - sent)
            i = sent % pool
            p.send(builder.build(doubled[i:i + n]))
            sent += n
            if p.in_flight >= in_flight:
                p.receive(max(1, in_flight // 4))
                if time.monotonic() > deadline:
                    errors.append(f"time limit {time_limit_s}s reached")
                    break
        if p.in_flight:
            p.receive(p.in_flight)
        seconds = time.perf_counter() - t0
        window.end()
        if p.errors:
            errors.append(f"{p.errors} produce requests answered with an error")
    finally:
        p.close()
    hw = wait_high_watermark(bootstrap, topic, start_hw + sent, timeout_s=10)
    stored = hw - start_hw
    return {"messages": stored, "sent": sent, "seconds": seconds, "msgs_per_s": rate(stored, seconds),
            "ok": stored == messages and not errors, "errors": errors,
            "client": "message sets: RecordBatch v2 built in Python, lean pipelined Produce v8 client (bench)",
            "settings": f"acks={acks}, {batch} messages per request, up to {in_flight} requests in flight"}
