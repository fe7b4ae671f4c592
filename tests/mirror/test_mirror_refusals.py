"""What the offline broker or the audit walk refuses: a coalesced batch over the offline broker's
message.max.bytes is split back (exactly once, in order, no stall); an original batch too large alone is
retried, never skipped; a batch whose records do not parse is mirrored and counted (real brokers)."""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections import Counter

import crc32c
import pytest
from mirror_batches import build_batch, records
from mirror_harness import produce, read_log, wait_for, wait_partitions

from ferry.client.audit.bucket import BUCKET_MS, bucket_start
from ferry.client.wire_client import WireClient
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_limits import COALESCE_BYTES
from ferry.mirror.mirror_stream import MirrorStream
from ferry.wire.protocol import produce as produce_api
from ferry.zk.cluster_registry import ClusterRegistry
from tests.client.group_helpers import TcpProxy, close_both

pytestmark = pytest.mark.slow

OFFLINE_MAX = 20_000
TP = ("t", 0)


FAST_FLUSH = ("--flush-ms", "20")  # acks=all answers after the fsync: many small batches go faster


def _clusters(cluster_factory, offline_args: tuple[str, ...] = ()):
    live = cluster_factory(1, "live", extra_args=FAST_FLUSH)
    offline = cluster_factory(1, "offline", extra_args=FAST_FLUSH + offline_args)
    for c in (live, offline):
        with ClusterRegistry(c.zk_connect) as reg:
            reg.create_topic("t", 1)
        wait_partitions(c.bootstrap, "t", 1)
    return live, offline


def _end(bootstrap: str) -> int:
    client = WireClient(bootstrap)
    try:
        return client.list_offsets({TP: -1})[TP].offset
    finally:
        client.close()


def _produce_raw(bootstrap: str, data: bytes) -> None:
    """One Produce request carrying ``data`` (hand-built batches) to partition t-0."""
    client = WireClient(bootstrap)
    try:
        client.refresh_metadata(["t"])
        conn = client.connection(client.leaders[TP])
        results = produce_api.parse_response(conn.request(*produce_api.encode_request([("t", [(0, data)])], -1, 10_000)))
        assert [r.error_code for r in results["t"]] == [0]
    finally:
        client.close()


def _errors(metrics: MirrorMetrics, kind: str) -> float:
    return metrics.registry.get_sample_value("ferry_mirror_errors_total", {"kind": kind}) or 0.0


def test_coalesced_batches_too_large_for_the_offline_broker_are_split(cluster_factory, caplog) -> None:
    live, offline = _clusters(cluster_factory, ("--max-message-bytes", str(OFFLINE_MAX)))
    metrics = MirrorMetrics()
    stream = MirrorStream(0, WireClient(live.bootstrap), WireClient(offline.bootstrap), metrics, fetch_wait_ms=100)
    assert stream.fetcher.coalesce_bytes == COALESCE_BYTES > OFFLINE_MAX
    small_batches = {"batch.num.messages": 25, "linger.ms": 1}  # ~1-2 KB batches: coalesced by the mirror
    produce(live.bootstrap, "t", 1, 6000, compression="none", config=small_batches)  # a backlog to coalesce
    producer = threading.Thread(target=lambda: produce(live.bootstrap, "t", 1, 6000, start=100_000,
                                                       compression="none", config=small_batches))
    caplog.set_level(logging.WARNING, logger="ferry.mirror")
    stream.start()
    producer.start()  # and more while the mirror runs
    try:
        stream.assign({TP: 0})
        producer.join(120)
        end = _end(live.bootstrap)
        assert end == 12_000
        wait_for(lambda: stream.committable().get(TP) == end, 90, "the stream to copy everything (no stall)")
        assert read_log(offline.bootstrap, {"t": 1}) == read_log(live.bootstrap, {"t": 1})  # once, in order
        assert _end(offline.bootstrap) == end
        assert 0 < stream.fetcher.coalesce_limits[TP] < OFFLINE_MAX  # still coalescing, below the broker's limit
        assert _errors(metrics, "coalesced_too_large") >= 1
        assert not metrics.registry.get_sample_value("ferry_mirror_syncs_total", {"kind": "refused_sequence"})
        assert "refused a coalesced batch" in caplog.text

        # a batch too large on its own cannot be split: ERROR, retried, never skipped or passed
        big = build_batch([(int(time.time() * 1000), b"big", b"x" * (OFFLINE_MAX + 5000), [])], 0)
        _produce_raw(live.bootstrap, big)
        produce(live.bootstrap, "t", 1, 10, start=90_000, compression="none")
        time.sleep(3)
        assert stream.committable().get(TP) == end and _end(offline.bootstrap) == end
        assert any(r.levelno == logging.ERROR and "MESSAGE_TOO_LARGE" in r.getMessage() for r in caplog.records)
    finally:
        producer.join(120)
        stream.stop()


def test_a_batch_whose_records_do_not_parse_is_mirrored_and_counted(cluster_factory, caplog) -> None:
    live, offline = _clusters(cluster_factory)
    b0 = int(time.time() * 1000) // BUCKET_MS * BUCKET_MS - 2 * BUCKET_MS
    r1 = records(10, b0 + 1000, step_ms=10)
    r2 = records(10, b0 - 5000, step_ms=1000)  # crosses into the previous bucket: the walk would split it
    r3 = records(10, b0 + BUCKET_MS + 7, step_ms=1)
    garbage = bytearray(build_batch(r2, 0))
    garbage[61:64] = b"\xff\xff\xff"  # the first record's length varint runs off
    struct.pack_into(">I", garbage, 17, crc32c.crc32c(bytes(garbage[21:])))  # a valid CRC all the same
    _produce_raw(live.bootstrap, build_batch(r1, 0))
    _produce_raw(live.bootstrap, bytes(garbage))
    _produce_raw(live.bootstrap, build_batch(r3, 0))
    metrics = MirrorMetrics()
    stream = MirrorStream(0, WireClient(live.bootstrap), WireClient(offline.bootstrap), metrics, fetch_wait_ms=100)
    caplog.set_level(logging.WARNING, logger="ferry.mirror")
    stream.start()
    try:
        stream.assign({TP: 0})
        wait_for(lambda: stream.committable().get(TP) == 30, 60, "the stream to copy past the bad batch")
        assert _end(offline.bootstrap) == 30
        counts = Counter({("t", b): n for b, n in stream.take_progress()[TP].counts.items()})
        expected = Counter(("t", bucket_start(ts)) for ts, *_ in r1 + r3)
        expected[("t", bucket_start(r2[0][0]))] += 10  # all ten in the bucket of the batch's first timestamp
        assert counts == expected and sum(counts.values()) == 30
        assert _errors(metrics, "audit_walk") == 1
        bad = [r for r in caplog.records if r.levelno == logging.ERROR and "does not parse" in r.getMessage()]
        assert len(bad) == 1 and "t-0" in bad[0].getMessage() and "offset 10" in bad[0].getMessage()
    finally:
        stream.stop()


class AnswerDropper(TcpProxy):
    """A loopback proxy in front of the offline broker that, once armed, forwards the next Produce request
    and then cuts the connection instead of passing the answer on: the mirror cannot know whether that
    request was written (an unknown outcome), exactly what a link cut mid-request leaves behind."""

    def __init__(self, target_port: int) -> None:
        super().__init__("127.0.0.1", target_port)
        self.armed = 0
        self.dropped = 0

    def _forward(self, client, upstream) -> None:
        state = {"produce_sent": False}
        threading.Thread(target=self._requests, args=(client, upstream, state), daemon=True).start()
        threading.Thread(target=self._answers, args=(upstream, client, state), daemon=True).start()

    def _requests(self, src, dst, state) -> None:
        buf = b""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                buf += data
                while len(buf) >= 6:  # frame: int32 size, then int16 api key
                    size = struct.unpack_from(">i", buf)[0]
                    if len(buf) < 4 + size:
                        break
                    if struct.unpack_from(">h", buf, 4)[0] == 0:
                        with self._lock:
                            if self.armed:
                                self.armed -= 1
                                state["produce_sent"] = True
                    buf = buf[4 + size:]
        except OSError:
            pass
        finally:
            close_both(src, dst)

    def _answers(self, src, dst, state) -> None:
        def drop(_chunk: bytes) -> bool:  # the answer (or one before it) once the produce went: never delivered
            if state["produce_sent"]:
                self.dropped += 1
            return state["produce_sent"]

        self._pipe(src, dst, drop)


def test_a_too_large_coalesced_batch_with_an_unknown_outcome_is_split_too(cluster_factory, caplog) -> None:
    """The first produce to the offline broker is refused as too large, but the answer never arrives: the
    batch's outcome is unknown, so it is resent byte-identical and refused again. The offline broker
    answers a written batch's retry as a duplicate whatever its size, so that refusal means "not written"
    and the mirror splits it like any other: no stall, everything once and in order."""
    from ferry.embedded import BrokerProcess, free_port

    live = cluster_factory(1, "live", extra_args=FAST_FLUSH)
    offline = cluster_factory(0, "offline")
    port = free_port("127.0.0.1")
    proxy = AnswerDropper(port)
    b = BrokerProcess(1, offline.root / "broker-1" / "data", offline.zk_connect, "offline", port=port,
                      extra_args=(*FAST_FLUSH, "--max-message-bytes", str(OFFLINE_MAX),
                                  "--advertised", f"127.0.0.1:{proxy.port}"))
    offline.brokers[1] = b
    b.start()
    for c in (live, offline):
        with ClusterRegistry(c.zk_connect) as reg:
            reg.create_topic("t", 1)
        wait_partitions(c.bootstrap, "t", 1)
    small_batches = {"batch.num.messages": 25, "linger.ms": 1}
    produce(live.bootstrap, "t", 1, 4000, compression="none", config=small_batches)
    end = _end(live.bootstrap)
    proxy.armed = 1
    metrics = MirrorMetrics()
    stream = MirrorStream(0, WireClient(live.bootstrap), WireClient(f"127.0.0.1:{proxy.port}"), metrics,
                          fetch_wait_ms=100)
    caplog.set_level(logging.WARNING, logger="ferry.mirror")
    stream.start()
    try:
        stream.assign({TP: 0})
        wait_for(lambda: stream.committable().get(TP) == end, 90, "the stream to copy everything (no stall)")
        assert proxy.dropped == 1  # the unknown outcome really happened
        assert read_log(offline.bootstrap, {"t": 1}) == read_log(live.bootstrap, {"t": 1})  # once, in order
        assert _errors(metrics, "coalesced_too_large") >= 1
        assert not metrics.registry.get_sample_value("ferry_mirror_syncs_total", {"kind": "refused_sequence"})
    finally:
        stream.stop()
        proxy.close()
