"""One-message produce requests on a real broker process and a raw socket (issue 20, goal 3): requests sent back
to back are answered in order with consecutive offsets, whatever way they arrive — a burst larger than the
in-flight limit, a request split across sends, one request per send — and a bad request met while the
connection's readiness callback handles requests still closes the connection after the answers it is owed.
Every loop is bounded in count and time."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest
from broker_wire import (
    WireClient,
    build_batch,
    create_topic,
    leaders,
    parse_produce,
    produce_frame,
    recv_exact,
    start_brokers,
)

from ferry.wire.protocol.primitives import Reader

TOPIC = "small"


@pytest.fixture
def broker(zk_connect: str, tmp_path: Path):
    _zk, brokers = start_brokers(zk_connect, tmp_path, 1)
    try:
        client = WireClient(brokers[0].bootstrap)
        assert create_topic(client, TOPIC, 1)[0] == 0
        leaders(client, TOPIC, 1)
        client.close()
        yield brokers[0]
    finally:
        for b in brokers:
            b.stop()


def _request(correlation_id: int, value: bytes, acks: int = 1, version: int = 8) -> bytes:
    return produce_frame(correlation_id, TOPIC, build_batch([value]), "small-test", acks, version)




def _answers(s: socket.socket, n: int, version: int = 8) -> list[tuple[int, int, int]]:
    """(correlation id, error code, base offset) of the next ``n`` answers."""
    out = []
    for _ in range(n):
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        frame = recv_exact(s, size)
        r = Reader(frame, 4)
        res = parse_produce(r, version)[(TOPIC, 0)]
        out.append((struct.unpack_from(">i", frame)[0], res.error, res.base_offset))
    return out


def _connect(broker) -> socket.socket:
    host, port = broker.bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=15)


def test_pipelined_one_message_requests_are_answered_in_order(broker):
    s = _connect(broker)
    try:
        # 300 requests in one burst: more than the 128 a connection may have unanswered (the broker stops
        # reading and goes on when answers drain), the last one split across two sends.
        burst = b"".join(_request(i, b"v%d" % i) for i in range(300))
        last = _request(300, b"v300")
        s.sendall(burst + last[:20])
        time.sleep(0.2)
        s.sendall(last[20:])
        got = _answers(s, 301)
        assert got == [(i, 0, i) for i in range(301)]
        # One request per send, each waited for: the readiness callback handles every one of them.
        for i in range(301, 341):
            s.sendall(_request(i, b"v%d" % i))
            assert _answers(s, 1) == [(i, 0, i)]
        # acks=-1 answers keep their place among acks=1 answers.
        s.sendall(_request(341, b"a", acks=-1) + _request(342, b"b") + _request(343, b"c", acks=-1, version=3))
        assert _answers(s, 2) == [(341, 0, 341), (342, 0, 342)]
        assert _answers(s, 1, version=3) == [(343, 0, 343)]
    finally:
        s.close()


def test_a_bad_request_after_good_ones_closes_the_connection_after_their_answers(broker):
    s = _connect(broker)
    try:
        # Two good requests, then a size prefix beyond socket.request.max.bytes, all in one send.
        s.sendall(_request(1, b"x") + _request(2, b"y") + struct.pack(">i", 0x7FFFFFF0) + b"\0" * 8)
        assert _answers(s, 2) == [(1, 0, 0), (2, 0, 1)]
        s.settimeout(10)
        assert s.recv(1) == b""  # closed, nothing more written
    finally:
        s.close()
    # The broker goes on serving other connections.
    s = _connect(broker)
    try:
        s.sendall(_request(3, b"z"))
        assert _answers(s, 1) == [(3, 0, 2)]
    finally:
        s.close()
