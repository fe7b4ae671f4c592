"""MessageSetProducer / MessageSetConsumer (the paper's low-level API) against real ZooKeeper and brokers:
exact round trips, interop with confluent-kafka both ways (incl. a compressed topic), every promised error,
nothing written on refusal, and the pipelining bound."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Producer as CkProducer

from ferry.client import MessageSetConsumer, MessageSetProducer
from ferry.client.errors import BrokerUnavailableError, ProduceError, UnknownPartitionError, UnknownTopicError
from ferry.client.message_set_consumer import (
    CorruptMessageSetError,
    FetchError,
    OffsetOutOfRangeError,
    Record,
    walk_batches,
)
from ferry.client.wire_client import WireClient
from ferry.wire.record.message_set_builder import MessageSetBuilder
from tests.client.conftest import create_topic
from tests.client.group_helpers import wait_until
from tests.conftest import Cluster

MAX_MESSAGE_BYTES = 100_000


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    """Two brokers (partition leaders on both), flushing every 20 ms, small max.message.bytes."""
    import uuid

    c = Cluster(tmp_path_factory.mktemp("message-sets"), f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/live",
                "live")
    for _ in range(2):
        c.add_broker(extra_args=("--flush-ms", "20", "--max-message-bytes", str(MAX_MESSAGE_BYTES)))
    yield c
    c.stop()


def _create(cluster: Cluster, topic: str, partitions: int) -> None:
    """Create through ZooKeeper, then wait until every broker's metadata has the topic's leaders (the
    brokers learn about it by watch: a client asking at once may hear UNKNOWN_TOPIC_OR_PARTITION)."""
    create_topic(cluster.zk_connect, topic, partitions)
    for b in cluster.brokers.values():
        client = WireClient(b.bootstrap)

        def known(client=client) -> bool:
            t = client.refresh_metadata([topic]).topics.get(topic)
            return t is not None and t.error_code == 0 and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions)

        try:
            wait_until(known, 20, what=f"topic {topic} in broker metadata")
        finally:
            client.close()


def _sets(n_sets: int, seed: int) -> list[list[tuple[bytes | None, bytes, int]]]:
    """Message sets of varied shape: equal and mixed value sizes, some keys, per-record timestamps."""
    base = 1_700_000_000_000 + seed
    out = []
    for k in range(n_sets):
        size = 20 + (k * 37) % 300
        if k % 3 == 0:  # the equal-size fast path: no keys, one timestamp
            out.append([(None, (b"%d-%d-" % (k, i)).ljust(size, b"."), base + k) for i in range(20)])
        else:
            out.append([(b"k%d" % i if i % 2 else None, b"v%d-%d-" % (k, i) * (1 + i % 5), base + k * 10 + i % 7)
                        for i in range(1 + k % 40)])
    return out


def _send(p: MessageSetProducer, builder: MessageSetBuilder, topic: str, partition: int, s) -> int:
    keys = [k for k, _, _ in s]
    values = [v for _, v, _ in s]
    stamps = [t for _, _, t in s]
    if all(k is None for k in keys) and len(set(stamps)) == 1:
        return p.send(topic, partition, builder.build(values, stamps[0]))
    return p.send(topic, partition, builder.build(values, stamps, keys=keys))


def _hw(cluster: Cluster, topic: str, partition: int) -> int:
    with MessageSetConsumer(cluster.bootstrap, topic, partition, "latest") as c:
        return c.position


def test_round_trip_exact_values_offsets_and_acks(cluster):
    _create(cluster, "rt", 2)
    builder = MessageSetBuilder()
    acks = []
    expected: dict[int, list[tuple]] = {0: [], 1: []}
    seqs: dict[int, tuple[int, int]] = {}
    with MessageSetProducer(zookeeper=cluster.zk_connect, acks=-1, max_in_flight=8, on_ack=acks.append) as p:
        assert {p.cluster.leaders.get(("rt", q)) for q in (0, 1)} <= {None, 1, 2}
        for k, s in enumerate(_sets(300, 0)):
            part = k % 2
            seq = _send(p, builder, "rt", part, s)
            seqs[seq] = (part, len(expected[part]))
            expected[part] += [(len(expected[part]) + i, t, key, v) for i, (key, v, t) in enumerate(s)]
        p.flush()
        assert p.in_flight == 0 and p.acked == 300 and p.failed == 0
        assert len({n for n in p.cluster.leaders.values()}) == 2  # the two partitions have different leaders
    total = sum(len(v) for v in expected.values())
    assert total > 3000
    # every set landed where the producer said, in order: base offset = records before it in the partition
    assert [a.seq for a in acks if a.partition == 0] == sorted(s for s, (q, _) in seqs.items() if q == 0)
    for a in acks:
        assert a.topic == "rt" and (a.partition, a.base_offset) == seqs[a.seq]

    for part in (0, 1):
        with MessageSetConsumer(cluster.bootstrap, "rt", part, max_bytes=4096, stop_at_end=True) as c:
            got = [tuple(r) for r in c]
            assert c.position == len(expected[part]) == c.high_watermark
        assert got == expected[part]
    # from the middle of a batch, values() fast path and records() agree
    start = expected[1][25][0]
    with MessageSetConsumer(None, "rt", 1, offset=start, zookeeper=cluster.zk_connect, stop_at_end=True) as c:
        sets = list(c.message_sets())
    assert sets[0].offset == start and sets[-1].next_offset == len(expected[1])
    assert [r for s in sets for r in s.records()] == [Record(*e) for e in expected[1][25:]]
    assert [v for s in sets for v in s.values()] == [e[3] for e in expected[1][25:]]
    # send_and_wait returns the base offset directly
    with MessageSetProducer(cluster.bootstrap) as p:
        assert p.send_and_wait("rt", 0, [b"a", b"bb"]) == len(expected[0])
        assert p.send_and_wait("rt", 0, [b"c"]) == len(expected[0]) + 2


def test_interop_with_confluent_kafka_both_ways(cluster):
    _create(cluster, "to-ck", 1)
    values = [b"m-%05d-" % i + b"x" * (i % 50) for i in range(2000)]
    with MessageSetProducer(cluster.bootstrap) as p:
        for i in range(0, len(values), 100):
            p.send("to-ck", 0, values[i:i + 100])
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "x", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 50})
    try:
        c.assign([TopicPartition("to-ck", 0, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value()))
    finally:
        c.close()
    assert got == list(enumerate(values))

    for codec in ("lz4", "none"):
        topic = f"from-ck-{codec}"
        _create(cluster, topic, 1)
        ck = CkProducer({"bootstrap.servers": cluster.bootstrap, "compression.type": codec, "linger.ms": 20,
                         "batch.num.messages": 300})
        # Each value compresses (librdkafka sends a batch uncompressed when compressing would not shrink it, as
        # a lone short record under load would not): every batch must then carry the codec.
        sent = [(b"key%d" % (i % 7), b"value-%d-" % i * (1 + i % 4) + b"v" * 120, 1_700_000_000_000 + i)
                for i in range(3000)]
        for key, value, ts in sent:
            ck.produce(topic, value, key, partition=0, timestamp=ts)
        assert ck.flush(30) == 0
        with MessageSetConsumer(cluster.bootstrap, topic, 0, max_bytes=8192, stop_at_end=True,
                                idle_timeout_s=20) as mc:
            sets = list(mc.message_sets())
        assert sum(s.batches for s in sets) > 5
        assert [tuple(r) for s in sets for r in s] == [(i, ts, k, v) for i, (k, v, ts) in enumerate(sent)]
        if codec == "lz4":  # the batches really were compressed: attributes' codec bits
            assert all(s.data[22] & 7 == 3 for s in sets)


def test_refusals_raise_with_the_brokers_code_and_write_nothing(cluster):
    _create(cluster, "err", 2)
    builder = MessageSetBuilder()
    t0 = time.monotonic()
    with pytest.raises(UnknownTopicError):
        MessageSetProducer(cluster.bootstrap, metadata_wait_s=0.5).send("no-such-topic", 0, [b"x"])
    assert 0.5 <= time.monotonic() - t0 < 5  # asked again for metadata_wait_s, then refused
    with pytest.raises(UnknownPartitionError, match="partitions 0..1"):
        MessageSetProducer(cluster.bootstrap, metadata_wait_s=0.2).send("err", 5, [b"x"])
    with pytest.raises(UnknownTopicError):
        MessageSetConsumer(cluster.bootstrap, "no-such-topic", 0, metadata_wait_s=0.2)
    with pytest.raises(UnknownPartitionError):
        MessageSetConsumer(cluster.bootstrap, "err", 2, metadata_wait_s=0.2)
    for bad in (0, "0", 2, "1"):
        with pytest.raises(ValueError, match="acks"):
            MessageSetProducer(cluster.bootstrap, acks=bad)
    with pytest.raises(ValueError, match="RecordBatch"):
        MessageSetProducer(cluster.bootstrap).send("err", 0, b"not a batch")

    with MessageSetProducer(cluster.bootstrap, acks=1) as p:
        assert p.send_and_wait("err", 0, [b"first"]) == 0
        corrupt = bytearray(builder.build([b"a" * 100] * 3))
        corrupt[-5] ^= 0xFF  # a value byte: the CRC no longer matches
        p.send("err", 0, bytes(corrupt))
        with pytest.raises(ProduceError) as e:
            p.flush()
        assert e.value.code == 2 and e.value.error_name == "CORRUPT_MESSAGE" and e.value.seq == 1
        assert "CORRUPT_MESSAGE" in str(e.value)
        p.send("err", 0, [b"y" * 60_000, b"z" * 60_000])  # 120 kB > max.message.bytes
        with pytest.raises(ProduceError) as e:
            p.flush()
        assert e.value.error_name == "MESSAGE_TOO_LARGE" and e.value.broker_message
        p.flush()  # each error is raised once
        # stale metadata: the other broker is not the leader; the next send looks the leader up again
        p.cluster.refresh_metadata(["err"])
        leader = p.cluster.leaders[("err", 1)]
        p.cluster.leaders[("err", 1)] = 3 - leader
        with pytest.raises(ProduceError) as e:
            p.send_and_wait("err", 1, [b"wrong broker"])
        assert e.value.error_name == "NOT_LEADER_OR_FOLLOWER"
        assert p.send_and_wait("err", 1, [b"right broker"]) == 0
        assert p.send_and_wait("err", 0, [b"second"]) == 1
        assert p.failed == 3
    # nothing of the refused sets was written (acks=1: wait, bounded, for the high watermark to pass what was
    # acknowledged, which a loaded follower may not have fetched yet)
    for part, want in ((0, [b"first", b"second"]), (1, [b"right broker"])):
        deadline = time.monotonic() + 20
        while _hw(cluster, "err", part) < len(want) and time.monotonic() < deadline:
            time.sleep(0.1)
        with MessageSetConsumer(cluster.bootstrap, "err", part, stop_at_end=True) as c:
            assert [r.value for r in c] == want

    with MessageSetConsumer(cluster.bootstrap, "err", 0, offset=50) as c:
        with pytest.raises(OffsetOutOfRangeError, match=r"0\.\.2") as e:
            next(iter(c))
        assert e.value.log_end == 2 and isinstance(e.value, FetchError)


def test_pipelining_stays_within_max_in_flight(cluster):
    _create(cluster, "pipe", 1)
    seen = []
    with MessageSetProducer(cluster.bootstrap, acks=-1, max_in_flight=4) as p:
        for i in range(300):
            p.send("pipe", 0, [b"%d" % i] * 10)
            seen.append(p.in_flight)
        p.flush()
        assert p.in_flight == 0
    assert max(seen) == 4  # pipelined, and never beyond the bound
    assert _hw(cluster, "pipe", 0) == 3000


def test_closed_connection_raises(cluster_factory):
    c = cluster_factory(1, extra_args=("--flush-ms", "20"))
    _create(c, "gone", 1)
    p = MessageSetProducer(c.bootstrap)
    mc = MessageSetConsumer(c.bootstrap, "gone", 0, max_wait_ms=50)
    try:
        assert p.send_and_wait("gone", 0, [b"v"] * 10) == 0
        assert len(next(mc.message_sets()).values()) == 10
        c.stop()
        with pytest.raises(BrokerUnavailableError):
            for _ in range(1000):  # the first send may still fit in the socket buffer
                p.send("gone", 0, [b"v"] * 10)
            p.flush()
        with pytest.raises(BrokerUnavailableError):
            list(mc.message_sets())
    finally:
        p.close()
        mc.close()


def test_crc_check_and_partial_batches_from_the_headers():
    b = MessageSetBuilder(10)
    data = b.build([b"0123456789"] * 5) + b.build([b"abc", b"de"], [1, 2], keys=[None, b"k"])
    one = len(b.build([b"0123456789"] * 5))
    assert walk_batches(data, True) == (2, len(data), 2)  # the next offset comes from the last batch (base 0)
    assert walk_batches(data[:-3], True) == (1, one, 5)  # a partial last batch is left for the next fetch
    bad = bytearray(data)
    bad[one - 2] ^= 1
    with pytest.raises(CorruptMessageSetError, match="CRC"):
        walk_batches(bytes(bad), True)
    assert walk_batches(bytes(bad), False)[0] == 2  # check_crcs=False skips it
    with pytest.raises(ValueError):
        b.build([])
    with pytest.raises(ValueError, match="keys"):
        b.build([b"a"], keys=[b"a", b"b"])


def test_a_topic_used_the_moment_it_is_created(cluster):
    """Brokers learn of a topic by ZooKeeper watch a moment after it is written: the clients ask again
    instead of failing (metadata_wait_s), as Kafka clients wait for metadata."""
    for i in range(3):
        topic = f"fresh-{i}"
        create_topic(cluster.zk_connect, topic, 2)  # no waiting for the brokers
        with MessageSetProducer(cluster.bootstrap) as p:
            assert p.send_and_wait(topic, 1, [b"first %d" % i]) == 0
        with MessageSetConsumer(cluster.bootstrap, topic, 1, stop_at_end=True, idle_timeout_s=20) as c:
            assert [r.value for r in c] == [b"first %d" % i]
