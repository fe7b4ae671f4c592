"""Connections and memory at scale (issue 20), on a real broker process and real sockets: idle connections cost a
few KB and give it back, a memory pool bounds the requests being received at once (queued.max.request.bytes),
bad-request log lines are rate-limited, and limits guard the broker from one client or one request
(max.connections.per.ip, fetch.wait.max.ms, max.broker.partitions). Every loop is bounded in count and time."""

from __future__ import annotations

import random
import socket
import struct
import time
from pathlib import Path

import psutil
import pytest
from broker_wire import (
    API_VERSIONS,
    WireClient,
    api_versions,
    build_batch,
    create_topic,
    fetch,
    leaders,
    produce_frame,
    recv_exact,
    start_brokers,
)

from ferry.broker.server.connection_buffer import READ_BUFFER

CONNECTIONS = 400


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def settle_rss(pid: int, seconds: float = 1.5) -> float:
    time.sleep(seconds)
    return rss_mb(pid)


@pytest.fixture
def broker(zk_connect: str, tmp_path: Path):
    _zk, brokers = start_brokers(zk_connect, tmp_path, 1, extra_args=(
        "--override", "queued.max.request.bytes=8388608",  # 8 MiB of large requests at once
        "--override", "max.connections.per.ip=600",
        "--override", "fetch.wait.max.ms=300",
        "--override", "max.broker.partitions=1000"))
    try:
        yield brokers[0]
    finally:
        for b in brokers:
            b.stop()


def _api_versions_frame(correlation_id: int) -> bytes:
    client_id = b"idle"
    body = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def _open_idle(address: str, n: int) -> list[socket.socket]:
    """n connections that each made one request and got its answer, then stay open doing nothing."""
    host, port = address.rsplit(":", 1)
    socks = []
    try:
        for i in range(n):
            s = socket.create_connection((host, int(port)), timeout=10)
            socks.append(s)
            s.sendall(_api_versions_frame(i))
        for s in socks:
            size = struct.unpack(">i", recv_exact(s, 4))[0]
            recv_exact(s, size)
    except BaseException:
        for s in socks:  # none left open behind a failure
            s.close()
        raise
    return socks


def test_idle_connections_cost_a_few_kb_and_give_it_back(broker) -> None:
    pid = broker.pid
    before = settle_rss(pid, 0.5)
    socks = _open_idle(broker.bootstrap, CONNECTIONS)
    try:
        with_idle = settle_rss(pid)
        per_conn_kb = (with_idle - before) * 1024 / CONNECTIONS
        assert per_conn_kb < 40, f"{per_conn_kb:.1f} KB per idle connection ({before:.1f} -> {with_idle:.1f} MB)"
        # a busy connection grows its read buffer, then gives it back once it waits with nothing buffered
        with WireClient(broker.bootstrap) as c:
            for _ in range(20):
                assert api_versions(c)[0] == 0
    finally:
        for s in socks:
            s.close()
    after = settle_rss(pid, 2.0)
    assert after - before < max(8.0, 0.5 * (with_idle - before) + 4), (before, with_idle, after)
    with WireClient(broker.bootstrap) as c:
        assert api_versions(c)[0] == 0


def test_slow_huge_requests_wait_for_the_memory_pool(broker) -> None:
    """16 connections each announce a 50 MiB request and send it slowly: without the pool the broker would
    allocate 800 MiB; with queued.max.request.bytes=8 MiB at most one such request is buffered at a time (one
    larger than the pool waits for the whole pool), the others wait without allocating, and the broker serves."""
    pid = broker.pid
    before = settle_rss(pid, 0.5)
    host, port = broker.bootstrap.rsplit(":", 1)
    socks = []
    try:
        for i in range(16):
            s = socket.create_connection((host, int(port)), timeout=10)
            head = struct.pack(">ihhi", 50 * 2**20, 0, 8, i)  # size, Produce v8, correlation id
            s.sendall(head + bytes(4096))
            socks.append(s)
        deadline = time.monotonic() + 3.0
        peak = before
        while time.monotonic() < deadline:
            for s in socks:
                try:
                    s.send(bytes(1024))
                except OSError:
                    pass
            peak = max(peak, rss_mb(pid))
            time.sleep(0.1)
        assert peak - before < 120, f"broker RSS {before:.0f} -> {peak:.0f} MB with 16 slow 50 MiB requests"
        with WireClient(broker.bootstrap) as c:  # the broker keeps serving others meanwhile
            assert api_versions(c)[0] == 0
    finally:
        for s in socks:
            s.close()
    with WireClient(broker.bootstrap) as c:
        assert api_versions(c)[0] == 0


def test_a_large_request_sent_in_pieces_arrives_whole(broker) -> None:
    """A request larger than a connection's read buffer is received into a buffer of its own, not zeroed first
    (produce_parse.frame_buffer): sent in 64 KiB pieces with pauses, its ~750 KB batch is stored and read
    back byte for byte (the fields the broker sets, baseOffset and partitionLeaderEpoch, aside)."""
    rng = random.Random(7)
    batch = build_batch([rng.randbytes(5000) for _ in range(150)])
    with WireClient(broker.bootstrap) as c:
        assert create_topic(c, "large", 1)[0] == 0
        leaders(c, "large", 1)
        host, port = broker.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            frame = produce_frame(1, "large", bytes(batch), "pieces", acks=-1)
            assert len(frame) > 2 * READ_BUFFER
            for i in range(0, len(frame), 65536):
                s.sendall(frame[i:i + 65536])
                if i % (16 * 65536) == 0:
                    time.sleep(0.02)
            answer = recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0])
        assert struct.unpack_from(">i", answer, 0)[0] == 1  # the correlation id: answered
        got = fetch(c, "large", 0, 0, max_bytes=8 << 20)
        assert got.error == 0 and got.high_watermark == 150
        stored = got.records[:len(batch)]
        assert stored[:8] == bytes(8) and stored[16:] == bytes(batch[16:]) and stored[8:12] == batch[8:12]


def test_large_and_small_requests_pipelined_are_answered_in_order(broker) -> None:
    """After a large request the broker reads exactly the next frame (no read-ahead to copy): large, large,
    small, large, small, small produce requests written in one sendall are each answered, in order, and
    stored whole, whatever mix of exact and read-ahead receives that takes."""
    rng = random.Random(11)
    large = [build_batch([rng.randbytes(5000) for _ in range(120)]) for _ in range(3)]
    small = [build_batch([rng.randbytes(100) for _ in range(3)]) for _ in range(3)]
    order = [large[0], large[1], small[0], large[2], small[1], small[2]]
    with WireClient(broker.bootstrap) as c:
        assert create_topic(c, "mixed", 1)[0] == 0
        leaders(c, "mixed", 1)
        host, port = broker.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=20) as s:
            frames = [produce_frame(i, "mixed", bytes(b), "mixed", acks=-1) for i, b in enumerate(order)]
            assert len(frames[0]) > 2 * READ_BUFFER and len(frames[2]) < 4096
            s.sendall(b"".join(frames))
            answers = [recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0]) for _ in frames]
        assert [struct.unpack_from(">i", a, 0)[0] for a in answers] == list(range(len(frames)))
        got = fetch(c, "mixed", 0, 0, max_bytes=8 << 20)
        assert got.error == 0 and got.high_watermark == sum(3 if b in small else 120 for b in order)
        pos = 0
        for b in order:  # each stored byte for byte (baseOffset and partitionLeaderEpoch set by the broker)
            stored = got.records[pos:pos + len(b)]
            assert stored[16:] == bytes(b[16:]) and stored[8:12] == b[8:12]
            pos += len(b)


def _open_idle_up_to_the_limit(address: str, n: int, timeout_s: float = 30.0) -> list[socket.socket]:
    """n idle connections; one refused is opened again: the broker counts a closed connection (the fixture's
    readiness probe) until it has noticed the close, which a loaded machine may take a moment to do."""
    socks: list[socket.socket] = []
    deadline = time.monotonic() + timeout_s
    while len(socks) < n:
        try:
            socks += _open_idle(address, min(50, n - len(socks)))
        except OSError:  # ConnectionResetError and its kin
            assert time.monotonic() < deadline, f"only {len(socks)} of {n} connections accepted"
            time.sleep(0.2)
    return socks


def test_connections_per_ip_are_bounded(broker) -> None:
    socks = _open_idle_up_to_the_limit(broker.bootstrap, 600)
    try:
        host, port = broker.bootstrap.rsplit(":", 1)
        extra = socket.create_connection((host, int(port)), timeout=10)
        extra.settimeout(5)
        try:
            extra.sendall(_api_versions_frame(1))
            got = extra.recv(4)
        except OSError:
            got = b""
        assert got == b"", "the 601st connection from one address was served"
        extra.close()
        socks.pop().close()
        deadline = time.monotonic() + 5
        while True:  # the broker notices the close, then takes a new connection again
            try:
                again = _open_idle(broker.bootstrap, 1)[0]
                again.close()
                break
            except (ConnectionError, OSError):
                assert time.monotonic() < deadline, "no connection accepted after one closed"
                time.sleep(0.1)
    finally:
        for s in socks:
            s.close()
    log = broker.log_file.read_text(errors="replace")
    assert "max.connections.per.ip" in log


def test_bad_request_lines_are_rate_limited(broker) -> None:
    host, port = broker.bootstrap.rsplit(":", 1)
    start = broker.log_file.stat().st_size
    for _ in range(300):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(struct.pack(">i", -5))  # an impossible size: the broker closes the connection
        s.settimeout(5)
        try:
            s.recv(1)
        except OSError:
            pass
        s.close()
    with open(broker.log_file, "rb") as f:
        f.seek(start)
        lines = f.read().decode(errors="replace").splitlines()
    bad = [line for line in lines if "closing connection from" in line]
    assert 1 <= len(bad) <= 40, f"{len(bad)} lines for 300 bad connections"
    with WireClient(broker.bootstrap) as c:
        assert api_versions(c)[0] == 0


def test_fetch_wait_is_capped_and_huge_create_topics_refused(broker) -> None:
    with WireClient(broker.bootstrap) as c:
        err, msg = create_topic(c, "huge", 100_000)
        assert err == 44 and "max.broker.partitions" in (msg or ""), (err, msg)  # POLICY_VIOLATION
        assert create_topic(c, "small", 2)[0] == 0
        leaders(c, "small", 2)
        t0 = time.monotonic()
        fetch(c, "small", 0, 0, max_wait_ms=20_000, min_bytes=1)  # nothing to read: parked, then answered
        waited = time.monotonic() - t0
        assert 0.2 < waited < 3.0, f"a fetch asking for 20 s waited {waited:.2f} s (fetch.wait.max.ms=300)"
