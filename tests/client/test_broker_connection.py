"""BrokerConnection, the raw layer's one connection class, against a fake broker that echoes each request's
body (after the header) as its answer: both ways of sending and of receiving, pipelining, answers larger
than the read buffer, a large request written in pieces, and the failures that close the connection."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from ferry.client.broker_connection import BrokerConnection
from ferry.client.errors import BrokerUnavailableError, ClientError
from ferry.wire.protocol.header import read_request_header


class EchoBroker:
    """Answers every request with its body; ``corr_shift`` answers with a wrong correlation id."""

    def __init__(self, corr_shift: int = 0) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.corr_shift = corr_shift
        self.requests: list[tuple[int, int, int, str | None]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            f = conn.makefile("rb")
            while head := f.read(4):
                frame = f.read(struct.unpack(">i", head)[0])
                header, r = read_request_header(frame)
                self.requests.append((header.api_key, header.api_version, header.correlation_id, header.client_id))
                body = bytes(frame[r.pos:])
                conn.sendall(struct.pack(">ii", 4 + len(body), header.correlation_id + self.corr_shift) + body)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def broker():
    b = EchoBroker()
    yield b
    b.close()


def test_pipelined_requests_come_back_in_order(broker):
    conn = BrokerConnection(1, "127.0.0.1", broker.port, "me", timeout_s=5, read_buffer_bytes=64)
    try:
        corrs = [conn.send(3, 8, [b"req-%d" % i], context=i) for i in range(5)]
        assert conn.in_flight == 5 and corrs == list(range(5))
        assert bytes(conn.receive()) == b"req-0"
        ctx, body = conn.next_answer()
        assert (ctx, bytes(body)) == (1, b"req-1")
        assert [bytes(conn.receive()) for _ in range(3)] == [b"req-2", b"req-3", b"req-4"]
        assert conn.in_flight == 0
        assert broker.requests[0] == (3, 8, 0, "me")
        assert bytes(conn.request(18, 0, [b"again"])) == b"again"
    finally:
        conn.close()


def test_pre_framed_requests_and_answers_larger_than_the_read_buffer(broker):
    conn = BrokerConnection(1, "127.0.0.1", broker.port, "me", timeout_s=5, read_buffer_bytes=16,
                            send_buffer_bytes=1 << 16, receive_buffer_bytes=1 << 16)
    big = memoryview(bytes(range(256)) * 8192)  # 2 MiB: written in pieces, answered larger than the buffer
    try:
        for context in ("a", "b"):
            header = struct.pack(">hhih", 0, 8, conn.correlation_id, 2) + b"me"
            conn.send_frame([struct.pack(">i", len(header) + len(big)), header, big], context)
        owned = conn.receive()  # the first answer read into a buffer of its own
        ctx, view = conn.next_answer()  # the second grown into the read buffer
        assert ctx == "b" and owned == big and view == big
        assert conn.send(1, 4, [bytearray(b"x"), memoryview(b"yz")]) == 2
        _, body = conn.next_answer()
        assert bytes(body) == b"xyz"
    finally:
        conn.close()


def test_answers_received_into_a_reused_buffer(broker):
    """``receive(into=)``: each answer lands in the caller's buffer, which grows to the largest answer and
    is reused; a smaller answer after a larger one is read exactly (nothing past it is waited for)."""
    conn = BrokerConnection(1, "127.0.0.1", broker.port, "me", timeout_s=5, read_buffer_bytes=16)
    buf = bytearray()
    big = bytes(range(256)) * 4096  # 1 MiB, larger than the read buffer
    try:
        conn.send(3, 8, [big])
        assert conn.receive(into=buf) == big and len(buf) == len(big)
        for body in (b"small", b"", big[:70000]):
            conn.send(3, 8, [body])
            view = conn.receive(into=buf)
            assert view == body and view.obj is buf and len(buf) == len(big)
            view.release()
        held = conn.request(3, 8, [b"x"])  # a plain receive: its own buffer
        assert held == b"x"
        conn.send(3, 8, [big + b"more"])  # larger again while a view of buf is alive: a buffer of its own
        keep = memoryview(buf)
        grown = conn.receive(into=buf)
        assert grown == big + b"more" and grown.obj is not buf
        keep.release()
    finally:
        conn.close()


def test_a_wrong_correlation_id_closes_the_connection():
    broker = EchoBroker(corr_shift=7)
    conn = BrokerConnection(1, "127.0.0.1", broker.port, timeout_s=5)
    try:
        conn.send(3, 8, [b"x"])
        with pytest.raises(BrokerUnavailableError, match="out of order"):
            conn.receive()
        assert not conn.connected and conn.in_flight == 0
        with pytest.raises(BrokerUnavailableError, match="connection closed"):
            conn.next_answer()
    finally:
        conn.close()
        broker.close()


def test_nothing_outstanding_and_no_broker():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    conn = BrokerConnection(4, "127.0.0.1", port, timeout_s=1, connect_timeout_s=1)
    with pytest.raises(BrokerUnavailableError, match="cannot connect to broker 4"):
        conn.send(3, 8, [b"x"])
    b = EchoBroker()
    conn = BrokerConnection(4, "127.0.0.1", b.port, timeout_s=5)
    try:
        conn.connect()
        with pytest.raises(ClientError, match="no request outstanding"):
            conn.receive()
    finally:
        conn.close()
        b.close()
