"""BrokerConnection, the one Kafka connection class, and its asyncio face, against a fake broker that echoes
each request's body (after the header) as its answer: both ways of sending and of receiving, pipelining,
answers larger than the read buffer, a large request written in pieces, and the failures that close the
connection."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import struct
import threading
import time

import pytest

from ferry.client.errors import BrokerUnavailableError, ClientError
from ferry.wire.async_broker_connection import AsyncBrokerConnection
from ferry.wire.broker_connection import BrokerConnection
from ferry.wire.protocol.header import read_request_header


class EchoBroker:
    """Answers every request with its body; ``corr_shift`` answers with a wrong correlation id; ``gate``: reads
    nothing until it is set; ``delay_s``: waits that long before each answer."""

    def __init__(self, corr_shift: int = 0, gate: threading.Event | None = None, delay_s: float = 0.0) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.corr_shift = corr_shift
        self.gate = gate
        self.delay_s = delay_s
        self.requests: list[tuple[int, int, int, str | None]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:  # closed before a client came
            return
        if self.gate is not None:
            self.gate.wait(10)
        with conn, contextlib.suppress(OSError):  # a client that closed (or reset) its end: nothing to serve
            f = conn.makefile("rb")
            while head := f.read(4):
                frame = f.read(struct.unpack(">i", head)[0])
                header, r = read_request_header(frame)
                self.requests.append((header.api_key, header.api_version, header.correlation_id, header.client_id))
                body = bytes(frame[r.pos:])
                time.sleep(self.delay_s)
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


BIG = bytes(range(256)) * (128 * 1024)  # 32 MiB: more than the sockets on both ends buffer


def test_requests_sent_without_waiting_go_out_in_order(broker):
    """``send(wait=False)`` queues what the socket does not take; later requests, waited-for or not, follow
    the queued bytes, and a receive writes them before it waits for their answers."""
    conn = BrokerConnection(1, "127.0.0.1", broker.port, "me", timeout_s=10)
    try:
        conn.send(3, 8, [BIG], wait=False)
        conn.send(3, 8, [b"second"], wait=False)
        conn.send(3, 8, [b"third"])  # waits: the queue goes out first
        assert conn.unsent == 0 and conn.in_flight == 3
        assert conn.receive() == BIG
        conn.send(3, 8, [BIG[:5_000_000]], wait=False)
        assert [bytes(conn.receive()) for _ in range(2)] == [b"second", b"third"]
        assert conn.receive() == BIG[:5_000_000]
        assert [r[2] for r in broker.requests] == [0, 1, 2, 3]
    finally:
        conn.close()


def test_a_receive_pushes_other_connections_queued_requests():
    """While one connection waits for its answer, the queued requests of the ``push`` connections are
    written; ``answer_ready`` pushes its own connection's queue too."""
    gate = threading.Event()
    slow, held = EchoBroker(delay_s=0.5), EchoBroker(gate=gate)
    fetch = BrokerConnection(1, "127.0.0.1", slow.port, timeout_s=10)
    produce = BrokerConnection(2, "127.0.0.1", held.port, timeout_s=10)
    try:
        produce.send(0, 8, [BIG], wait=False)
        assert produce.unsent > 0 and produce.in_flight == 1  # the held broker reads nothing yet
        assert not produce.answer_ready()
        fetch.send(1, 11, [b"fetch"])
        gate.set()
        assert fetch.receive(push=[produce]) == b"fetch"  # answered after 0.5 s: time enough to write 32 MiB
        assert produce.unsent == 0
        produce.send(0, 8, [BIG[:3_000_000]], wait=False)
        deadline = time.monotonic() + 10
        while not produce.answer_ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert produce.receive() == BIG
        assert produce.receive() == BIG[:3_000_000]
    finally:
        fetch.close(), produce.close(), slow.close(), held.close()


def test_a_failed_push_closes_that_connection_and_the_receive_goes_on():
    """A push connection whose broker is gone is closed (its requests lost, as in_flight shows); the
    connection that was waiting gets its answer."""
    dead = socket.create_server(("127.0.0.1", 0))
    slow = EchoBroker(delay_s=0.5)
    fetch = BrokerConnection(1, "127.0.0.1", slow.port, timeout_s=10)
    produce = BrokerConnection(2, "127.0.0.1", dead.getsockname()[1], timeout_s=10)
    try:
        produce.send(0, 8, [BIG], wait=False)
        peer, _ = dead.accept()
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()  # reset: the queued bytes cannot go out
        fetch.send(1, 11, [b"fetch"])
        assert fetch.receive(push=[produce]) == b"fetch"
        assert not produce.connected and produce.in_flight == 0 and produce.unsent == 0
    finally:
        fetch.close(), produce.close(), slow.close(), dead.close()


def test_close_drops_queued_requests():
    gate = threading.Event()
    held = EchoBroker(gate=gate)
    conn = BrokerConnection(1, "127.0.0.1", held.port, timeout_s=10)
    try:
        conn.send(0, 8, [BIG], wait=False)
        assert conn.unsent > 0
        conn.close()
        assert conn.unsent == 0 and conn.in_flight == 0 and not conn.connected
    finally:
        gate.set()
        held.close()


def test_write_behind_with_file_descriptors_past_1023():
    """The waits poll (select() cannot watch a descriptor past 1023): a process with many connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    gate = threading.Event()
    slow, held = EchoBroker(delay_s=0.5), EchoBroker(gate=gate)
    fetch = BrokerConnection(1, "127.0.0.1", slow.port, timeout_s=10)
    produce = BrokerConnection(2, "127.0.0.1", held.port, timeout_s=10)
    try:
        assert fetch.connect().fileno() > 1023 and produce.connect().fileno() > 1023
        produce.send(0, 8, [BIG], wait=False)
        assert not produce.answer_ready()
        fetch.send(1, 11, [b"fetch"])
        gate.set()
        assert fetch.receive(push=[produce]) == b"fetch" and produce.unsent == 0
        assert produce.receive() == BIG
    finally:
        fetch.close(), produce.close(), slow.close(), held.close()
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ---------------------------------------------------------------------------- the asyncio face
def test_async_face_frames_as_the_blocking_one_and_numbers_its_requests(broker):
    async def main() -> None:
        conn = AsyncBrokerConnection(2, "127.0.0.1", broker.port, "replica-1")
        try:
            assert bytes(await conn.request(1, 11, [b"fetch-", memoryview(b"me")], 5)) == b"fetch-me"
            assert bytes(await conn.request(23, 3, [b"epochs"], 5)) == b"epochs"
            assert conn.connected
        finally:
            conn.close()

    asyncio.run(main())
    assert broker.requests == [(1, 11, 0, "replica-1"), (23, 3, 1, "replica-1")]


def test_async_face_failures_close_it_and_name_the_broker():
    async def main(port: int, what: str, timeout_s: float = 5) -> None:
        conn = AsyncBrokerConnection(3, "127.0.0.1", port, "txn-coordinator-1", connect_timeout_s=1)
        with pytest.raises(BrokerUnavailableError, match=f"broker 3 at 127.0.0.1:{port}: {what}"):
            await conn.request(27, 0, [b"x"], timeout_s)
        assert not conn.connected

    wrong, slow = EchoBroker(corr_shift=7), EchoBroker(delay_s=1.0)
    listener = socket.create_server(("127.0.0.1", 0))
    gone = listener.getsockname()[1]
    listener.close()
    try:
        asyncio.run(main(wrong.port, "out of order"))
        asyncio.run(main(slow.port, "request failed", timeout_s=0.2))
        asyncio.run(main(gone, "request failed"))
    finally:
        wrong.close()
        slow.close()
