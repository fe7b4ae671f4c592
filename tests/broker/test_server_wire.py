"""The broker's wire protocol against real broker processes (and a real ZooKeeper), spoken by a raw socket
client so every byte is the test's choice: versions, errors, ordering, long-poll, and bad input."""

from __future__ import annotations

import struct
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import (  # noqa: E402
    API_VERSIONS,
    FETCH,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
    WireClient,
    api_versions,
    build_batch,
    create_topic,
    decode_values,
    fetch,
    fetch_body,
    leaders,
    list_offsets,
    metadata,
    parse_fetch,
    parse_produce,
    produce,
    produce_body,
    start_brokers,
)

from ferry.wire.protocol.api_keys import ADVERTISED  # noqa: E402
from ferry.wire.protocol.primitives import Writer  # noqa: E402

MAX_MESSAGE = 100_000
MAX_REQUEST = 1_000_000


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("wire")
    zk, brokers = start_brokers(zk_server.connect, root, 2, extra_args=(
        "--max-message-bytes", str(MAX_MESSAGE), "--max-request-bytes", str(MAX_REQUEST), "--flush-ms", "20"))
    yield brokers
    for b in brokers:
        b.stop()
    for b in brokers:  # every bad-input test must leave the brokers alive
        assert b.proc.returncode == 0, f"broker {b.broker_id} exited with {b.proc.returncode}"


@pytest.fixture(scope="module")
def topic(cluster):
    """Topic 'wire' (4 partitions over both brokers): name, {partition: leader}, {broker id: address}."""
    with WireClient(cluster[0].bootstrap) as c:
        assert create_topic(c, "wire", 4) == (0, None)
        lead = leaders(c, "wire", 4)
    assert set(lead.values()) == {1, 2}
    return "wire", lead, {b.broker_id: b.bootstrap for b in cluster}


def _led_by(lead: dict[int, int], broker_id: int) -> int:
    return min(p for p, b in lead.items() if b == broker_id)


def _all_values(addr: str, topic: str, partition: int) -> list[tuple[int, bytes]]:
    with WireClient(addr) as c:
        out: list[tuple[int, bytes]] = []
        offset = 0
        while True:
            f = fetch(c, topic, partition, offset, max_wait_ms=0)
            assert f.error == 0
            vals = [(o, v) for o, v in decode_values(f.records) if o >= offset]
            if not vals:
                return out
            out.extend(vals)
            offset = vals[-1][0] + 1


def _wait_readable(c: WireClient, topic: str, partition: int, end: int) -> None:
    deadline = time.monotonic() + 10
    while fetch(c, topic, partition, 0, max_wait_ms=0).high_watermark < end:
        assert time.monotonic() < deadline, "data never became readable (flush)"
        time.sleep(0.02)


# ------------------------------------------------------------------------------------------- ApiVersions, Metadata

def test_api_versions_lists_exactly_what_is_served(cluster):
    with WireClient(cluster[0].bootstrap) as c:
        for v in (0, 1, 2):
            err, ranges = api_versions(c, v)
            assert err == 0
            assert ranges == {int(k): rng for k, rng in ADVERTISED.items()}
        assert ranges[PRODUCE] == (0, 8) and ranges[FETCH] == (4, 11) and ranges[FIND_COORDINATOR] == (0, 2)


def test_api_versions_v3_gets_unsupported_version_with_v0_body(cluster):
    with WireClient(cluster[0].bootstrap) as c:
        for v in (3, 4):
            # flexible request header v2 (tagged fields) and a compact-string body, as librdkafka sends it
            header = Writer().int16(API_VERSIONS).int16(v).int32(77 + v).string("rdkafka").buf + b"\x00"
            body = b"\x08librdk\x052.16\x00"
            payload = bytes(header) + body
            c.send_raw(struct.pack(">i", len(payload)) + payload)
            corr, r = c.recv()
            assert corr == 77 + v
            assert r.int16() == 35
            n = r.int32()
            got = {r.int16(): (r.int16(), r.int16()) for _ in range(n)}
            assert got == {int(k): rng for k, rng in ADVERTISED.items()}
            assert r.remaining() == 0
        assert api_versions(c, 2)[0] == 0  # the connection is still good


def test_metadata_from_any_broker_names_every_leader(cluster, topic):
    name, lead, addrs = topic
    for addr in addrs.values():
        with WireClient(addr) as c:
            # each broker learns the leaders from ZooKeeper on its own (eventually, as in Kafka): first wait
            # until this one knows them, then every version must say the same
            assert leaders(c, name, 4, timeout=30) == lead
            for v in range(0, 9):
                md = metadata(c, [name], version=v)
                assert {p: leader for p, (_e, leader) in md["topics"][name][1].items()} == lead
                assert set(md["brokers"]) == {1, 2}
                assert {f"{h}:{port}" for h, port, _ in md["brokers"].values()} == set(addrs.values())
            assert md["brokers"][1][2] == "live"  # rack = datacenter
            all_topics = metadata(c, None)["topics"]
            assert name in all_topics
            assert metadata(c, [], version=0)["topics"].keys() == all_topics.keys()  # v0: [] means all
            assert metadata(c, ["no-such-topic"])["topics"]["no-such-topic"][0] == 3


# ------------------------------------------------------------------------------------------- Produce, Fetch

def test_produce_fetch_roundtrip_all_versions(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 2)
    with WireClient(addrs[2]) as c:
        base = None
        for v in range(3, 9):
            res = produce(c, name, p, build_batch([b"v%d-%d" % (v, i) for i in range(5)]), acks=1, version=v)
            assert res.error == 0
            if base is not None:
                assert res.base_offset == base + 5
            base = res.base_offset
        _wait_readable(c, name, p, base + 5)
        for v in range(4, 12):
            f = fetch(c, name, p, 0, version=v)
            assert f.error == 0 and f.high_watermark >= base + 5
            values = [val for _o, val in decode_values(f.records)]
            assert values[:30] == [b"v%d-%d" % (pv, i) for pv in range(3, 9) for i in range(5)]
        # from the middle of a batch: the whole batch comes back (the client skips what it did not ask for)
        f = fetch(c, name, p, 7)
        assert decode_values(f.records)[0][0] == 5


def test_acks_minus_one_answers_after_fsync_and_data_is_readable(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 1)
    with WireClient(addrs[1]) as c:
        res = produce(c, name, p, build_batch([b"durable"]), acks=-1)
        assert res.error == 0
        # consumers see flushed data only; acks=-1 answered after the fsync, so it is readable at once
        f = fetch(c, name, p, res.base_offset)
        assert f.high_watermark >= res.base_offset + 1
        assert (res.base_offset, b"durable") in decode_values(f.records)


def test_acks_zero_sends_no_response_and_keeps_order(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 1)
    with WireClient(addrs[1]) as c:
        before = list_offsets(c, name, p, -1)[2]
        c.send(PRODUCE, 8, produce_body(name, p, build_batch([b"fire-and-forget"]), acks=0))
        corr = c.send(PRODUCE, 8, produce_body(name, p, build_batch([b"acked"]), acks=-1))
        got_corr, r = c.recv()
        assert got_corr == corr  # nothing came back for the acks=0 request
        res = parse_produce(r)[(name, p)]
        assert res.error == 0 and res.base_offset == before + 1
        values = [v for _o, v in decode_values(fetch(c, name, p, before).records)]
        assert values == [b"fire-and-forget", b"acked"]


def test_fetch_long_poll_wakes_on_new_data(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 2)
    with WireClient(addrs[2]) as c, WireClient(addrs[2]) as producer:
        end = list_offsets(c, name, p, -1)[2]
        threading.Timer(0.3, lambda: produce(producer, name, p, build_batch([b"wake"]), acks=1)).start()
        t0 = time.monotonic()
        f = fetch(c, name, p, end, max_wait_ms=8000)
        took = time.monotonic() - t0
        assert [v for _o, v in decode_values(f.records)] == [b"wake"]
        assert 0.25 < took < 3.0, took


def test_fetch_long_poll_times_out_empty(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 2)
    with WireClient(addrs[2]) as c:
        end = list_offsets(c, name, p, -1)[2]
        t0 = time.monotonic()
        f = fetch(c, name, p, end, max_wait_ms=400)
        took = time.monotonic() - t0
        assert f.error == 0 and f.records == b""
        assert 0.35 < took < 2.0, took


def test_pipelined_requests_are_answered_in_order(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 1)
    with WireClient(addrs[1]) as c:
        end = list_offsets(c, name, p, -1)[2]
        sent = []
        for i in range(30):
            if i % 3 == 0:  # a long-polling fetch that nothing will satisfy for a while
                sent.append(c.send(FETCH, 11, fetch_body(name, p, end + 10_000, max_wait_ms=150)))
            elif i % 3 == 1:
                sent.append(c.send(METADATA, 8, bytes(Writer().array_len(0).boolean(False).boolean(False)
                                                      .boolean(False).buf)))
            else:
                sent.append(c.send(PRODUCE, 8, produce_body(name, p, build_batch([b"p%d" % i]), acks=1)))
        got = [c.recv()[0] for _ in sent]
        assert got == sent


def test_a_burst_beyond_the_in_flight_limit_is_answered_completely_and_in_order(cluster, topic):
    """1,000 requests in one write (far more than the 128 a connection keeps unanswered), the client reading
    nothing until all are sent: reading pauses and resumes, ready answers are packed, parked ones (acks=-1,
    a long poll) keep their place."""
    name, lead, addrs = topic
    p = _led_by(lead, 1)
    with WireClient(addrs[1]) as c:
        produce(c, name, p, build_batch([b"flush what earlier tests left"]), acks=-1)
        start = list_offsets(c, name, p, -1)[2]
        frames, corrs, produced = [], [], 0
        for i in range(1000):
            if i % 250 == 0:
                body, api = fetch_body(name, p, start + 1_000_000, max_wait_ms=50), (FETCH, 11)
            else:
                acks = -1 if i % 100 == 1 else 1
                body, api = produce_body(name, p, build_batch([b"burst-%d" % i]), acks=acks), (PRODUCE, 8)
                produced += 1
            data = c.frame(api[0], api[1], body)
            corrs.append(struct.unpack_from(">i", data, 8)[0])
            frames.append(data)
        writer = threading.Thread(target=c.send_raw, args=(b"".join(frames),))
        writer.start()
        got = []
        for _ in corrs:
            answer = c.recv()
            assert answer is not None, "broker closed the connection"
            got.append(answer[0])
        writer.join(10)
        assert got == corrs
        deadline = time.monotonic() + 5  # the latest offset is the flushed one (flush.ms 20 here)
        while list_offsets(c, name, p, -1)[2] - start < produced and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list_offsets(c, name, p, -1)[2] - start == produced


def test_list_offsets_earliest_latest_and_by_time(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 2)
    with WireClient(addrs[2]) as c:
        start = list_offsets(c, name, p, -1)[2]
        t0 = 4_000_000_000_000  # far future timestamps so earlier tests' batches do not match
        for i in range(3):
            assert produce(c, name, p, build_batch([b"t%d" % i] * 2, base_timestamp=t0 + i * 1000), acks=-1).error == 0
        for v in range(1, 6):
            assert list_offsets(c, name, p, -2, version=v)[0::2] == (0, 0)
            assert list_offsets(c, name, p, -1, version=v)[0::2] == (0, start + 6)
            err, ts, off = list_offsets(c, name, p, t0 + 1000, version=v)
            assert (err, off) == (0, start + 2) and ts >= t0 + 1000
            assert list_offsets(c, name, p, t0 + 1500, version=v)[2] == start + 4
            assert list_offsets(c, name, p, t0 + 99_000, version=v)[2] == -1


def test_init_producer_id_is_unique_and_idempotent_retries_are_not_duplicated(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 1)
    ids = set()
    for addr in addrs.values():
        with WireClient(addr) as c:
            for v in (0, 1):
                r = c.request(INIT_PRODUCER_ID, v, bytes(Writer().string(None).int32(60000).buf))
                r.int32()
                assert r.int16() == 0
                pid, epoch = r.int64(), r.int16()
                assert pid >= 0 and epoch == 0
                ids.add(pid)
    assert len(ids) == 4
    pid = max(ids)
    with WireClient(addrs[1]) as c:
        batch = build_batch([b"once"], producer_id=pid, producer_epoch=0, base_sequence=0)
        first = produce(c, name, p, bytes(batch), acks=-1)
        again = produce(c, name, p, bytes(batch), acks=-1)  # a retry after a lost response
        assert first.error == 0 and again.error == 0 and again.base_offset == first.base_offset
        gap = build_batch([b"gap"], producer_id=pid, producer_epoch=0, base_sequence=5)
        assert produce(c, name, p, bytes(gap), acks=-1).error == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert list_offsets(c, name, p, -1)[2] == first.base_offset + 1


def test_find_coordinator_names_the_same_broker_everywhere(cluster):
    """Groups (docs/groups.md) and transactional ids (docs/transactions.md) have one coordinator, whoever is
    asked."""
    answers, txn_answers = set(), set()
    for b in cluster:
        with WireClient(b.bootstrap) as c:
            r = c.request(FIND_COORDINATOR, 0, bytes(Writer().string("group").buf))
            assert r.int16() == 0
            answers.add((r.int32(), r.string(), r.int32()))
            r = c.request(FIND_COORDINATOR, 1, bytes(Writer().string("txn").int8(1).buf))
            r.int32()  # throttle
            assert r.int16() == 0 and r.nullable_string() is None
            txn_answers.add((r.int32(), r.string(), r.int32()))
    assert len(answers) == 1 and answers.pop()[0] in {b.broker_id for b in cluster}
    assert len(txn_answers) == 1 and txn_answers.pop()[0] in {b.broker_id for b in cluster}


def test_create_topics_errors(cluster, topic):
    name, _lead, _addrs = topic
    with WireClient(cluster[1].bootstrap) as c:
        assert create_topic(c, name, 2)[0] == 36  # TOPIC_ALREADY_EXISTS
        assert create_topic(c, "bad/name", 1)[0] == 17  # INVALID_TOPIC_EXCEPTION
        assert create_topic(c, "rf3", 1, replication_factor=3)[0] == 38
        assert create_topic(c, "zero", 0)[0] == 37
        assert create_topic(c, "badcfg", 1, configs={"retention.ms": "soon"})[0] == 40
        for v in range(0, 5):
            assert create_topic(c, f"made-v{v}", 2, version=v)[0] == 0
        assert create_topic(c, "dflt", -1, replication_factor=-1)[0] == 0
        md = metadata(c, [f"made-v{v}" for v in range(5)] + ["dflt"])
        assert all(md["topics"][f"made-v{v}"][0] == 0 and len(md["topics"][f"made-v{v}"][1]) == 2 for v in range(5))
        assert len(md["topics"]["dflt"][1]) == 1


# ------------------------------------------------------------------------------------------- bad input

def test_errors_unknown_topic_partition_and_not_leader(cluster, topic):
    name, lead, addrs = topic
    mine, theirs = _led_by(lead, 1), _led_by(lead, 2)
    with WireClient(addrs[1]) as c:
        batch = bytes(build_batch([b"x"]))
        assert produce(c, "no-such-topic", 0, batch).error == 3
        assert produce(c, name, 99, batch).error == 3
        assert produce(c, name, theirs, batch).error == 6  # NOT_LEADER_OR_FOLLOWER
        assert fetch(c, name, theirs, 0).error == 6
        assert fetch(c, "no-such-topic", 0, 0).error == 3
        assert list_offsets(c, name, theirs, -1)[0] == 6
        assert list_offsets(c, name, 99, -1)[0] == 3
        assert produce(c, name, mine, batch, version=2).error == 35  # Produce v0-2 advertised, not served
        assert produce(c, name, mine, batch, acks=2).error == 21  # INVALID_REQUIRED_ACKS
        assert fetch(c, name, mine, 10**12).error == 1  # OFFSET_OUT_OF_RANGE
        assert produce(c, name, mine, None).error == 2


def test_bad_crc_and_oversized_batch_are_refused_and_nothing_else_changes(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 1)
    with WireClient(addrs[1]) as c:
        assert produce(c, name, p, build_batch([b"before"]), acks=-1).error == 0
        before = _all_values(addrs[1], name, p)
        bad = build_batch([b"corrupt me"] * 3)
        bad[-3] ^= 0xFF  # a record byte: the CRC-32C no longer matches
        assert produce(c, name, p, bytes(bad)).error == 2  # CORRUPT_MESSAGE
        big = build_batch([b"x" * (MAX_MESSAGE + 10)])
        assert produce(c, name, p, bytes(big)).error == 10  # MESSAGE_TOO_LARGE
        assert produce(c, name, p, b"\x00" * 30).error == 2  # shorter than a batch header
        res = produce(c, name, p, build_batch([b"after"]), acks=-1)  # same connection still works
        assert res.error == 0 and res.base_offset == before[-1][0] + 1
    assert _all_values(addrs[1], name, p) == before + [(res.base_offset, b"after")]


@pytest.mark.parametrize("garbage", [
    pytest.param(lambda c: struct.pack(">i", 1 << 30), id="size-over-limit"),
    pytest.param(lambda c: struct.pack(">i", MAX_REQUEST + 1) + b"\x00" * 64, id="size-just-over-limit"),
    pytest.param(lambda c: struct.pack(">i", -5), id="negative-size"),
    pytest.param(lambda c: struct.pack(">i", 3) + b"abc", id="shorter-than-header"),
    pytest.param(lambda c: c.frame(999, 0, b""), id="unknown-api-key"),
    pytest.param(lambda c: c.frame(FETCH, 3, b""), id="fetch-v3-not-served"),
    pytest.param(lambda c: c.frame(FETCH, 12, b""), id="fetch-v12-not-served"),
    pytest.param(lambda c: c.frame(METADATA, 9, b"\x01\x00"), id="metadata-flexible"),
    pytest.param(lambda c: c.frame(PRODUCE, 8, b"\xff\xff\x00\x01\x00\x00\x13\x88\x00\x00\x00\x05"),
                 id="truncated-produce"),
    pytest.param(lambda c: c.frame(METADATA, 1, struct.pack(">i", 2_000_000_000)), id="absurd-array-length"),
    pytest.param(lambda c: c.frame(METADATA, 1, struct.pack(">ih", 1, 500) + b"ab"), id="string-past-end"),
    pytest.param(lambda c: struct.pack(">i", 10) + struct.pack(">hhi", 3, 1, 5) + b"\xff\xfe",
                 id="bad-client-id-length"),
])
def test_malformed_input_closes_the_connection_and_the_broker_keeps_serving(cluster, topic, garbage):
    name, lead, addrs = topic
    p = _led_by(lead, 1)
    log_file = cluster[0].log_file
    log_size = log_file.stat().st_size
    with WireClient(addrs[1]) as bystander:  # a client already connected keeps working through it all
        assert api_versions(bystander)[0] == 0
        with WireClient(addrs[1]) as bad:
            assert api_versions(bad)[0] == 0
            bad.send_raw(garbage(bad))
            assert bad.closed_by_peer(timeout=5.0)
        with open(log_file, "rb") as f:
            f.seek(log_size)
            new_lines = f.read().decode(errors="replace")
        assert "WARNING" in new_lines and "closing connection from" in new_lines, new_lines
        assert produce(bystander, name, p, build_batch([b"still here"]), acks=1).error == 0
    with WireClient(addrs[1]) as fresh:
        assert metadata(fresh, [name])["topics"][name][0] == 0


def test_requests_before_a_bad_one_are_still_answered(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 2)
    with WireClient(addrs[2]) as c:
        corr = c.send(PRODUCE, 8, produce_body(name, p, build_batch([b"answered"]), acks=-1))
        c.send_raw(c.frame(4242, 0, b""))
        got = c.recv()
        assert got is not None and got[0] == corr
        assert parse_produce(got[1])[(name, p)].error == 0
        assert c.closed_by_peer()


def test_acks_zero_failure_closes_the_connection(cluster, topic):
    name, lead, addrs = topic
    with WireClient(addrs[1]) as c:
        c.send(PRODUCE, 8, produce_body(name, _led_by(lead, 2), build_batch([b"wrong broker"]), acks=0))
        assert c.closed_by_peer()


def test_fetch_response_respects_max_bytes_but_returns_at_least_one_batch(cluster, topic):
    name, lead, addrs = topic
    p = _led_by(lead, 2)
    with WireClient(addrs[2]) as c:
        start = list_offsets(c, name, p, -1)[2]
        for i in range(4):
            assert produce(c, name, p, build_batch([bytes([65 + i]) * 3000]), acks=-1).error == 0
        r = c.request(FETCH, 11, fetch_body(name, p, start, max_bytes=100))
        f = parse_fetch(r)[(name, p)]
        assert [o for o, _v in decode_values(f.records)] == [start]  # one batch although it exceeds 100 bytes
        f = fetch(c, name, p, start, max_bytes=6500)
        assert [o for o, _v in decode_values(f.records)] == [start, start + 1]
