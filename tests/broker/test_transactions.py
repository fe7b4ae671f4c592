"""Transactions (docs/transactions.md) with librdkafka's transactional producer and read_committed consumers
against real broker processes: commit, abort, an open transaction holding back the last stable offset,
consume-transform-produce with the group offsets in the transaction, a zombie producer fenced, and a
transaction spanning partitions led by two brokers. The broker crash is test_transactions_crash.py."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import WireClient, create_topic, leaders, list_offsets, start_brokers  # noqa: E402

from ferry.wire.protocol import fetch  # noqa: E402
from ferry.wire.protocol import list_offsets as lo

PARTITIONS = 2
TXN_OVERRIDES = ("--flush-ms", "20", "--override", "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
                 "--audit-topic-partitions", "1")


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    _zk, brokers = start_brokers(zk_server.connect, tmp_path_factory.mktemp("txn"), 2, extra_args=TXN_OVERRIDES)
    yield brokers
    for b in brokers:
        b.stop()


def new_topic(cluster, partitions: int = PARTITIONS) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    with WireClient(cluster[0].bootstrap) as c:
        err, msg = create_topic(c, name, partitions)
        assert err == 0, msg
        lead = leaders(c, name, partitions)
    if partitions >= 2:
        assert set(lead.values()) == {1, 2}, lead  # the transaction spans partitions on both brokers
    return name


def txn_producer(cluster, txn_id: str | None = None, **extra) -> Producer:
    p = Producer({"bootstrap.servers": cluster[0].bootstrap, "transactional.id": txn_id or uuid.uuid4().hex,
                  "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def consume_all(cluster, topic: str, isolation: str, partitions: int = PARTITIONS, idle_s: float = 2.0,
                group: str | None = None) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every message the consumer gets until nothing comes for ``idle_s``."""
    c = Consumer({"bootstrap.servers": cluster[0].bootstrap, "group.id": group or uuid.uuid4().hex,
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(m.error())
            out.append((m.partition(), m.offset(), m.value()))
            last = time.monotonic()
        return sorted(out)
    finally:
        c.close()


def values(rows) -> set[bytes]:
    return {v for _p, _o, v in rows}


def produce_txn(p: Producer, topic: str, prefix: str, n: int, commit: bool = True,
                partitions: int = PARTITIONS) -> set[bytes]:
    p.begin_transaction()
    sent = set()
    for i in range(n):
        v = f"{prefix}-{i}".encode()
        p.produce(topic, v, partition=i % partitions)
        sent.add(v)
    if commit:
        p.commit_transaction(30)
    else:
        assert p.flush(10) == 0  # written to the log (abort_transaction would drop what is still queued)
        p.abort_transaction(30)
    return sent


def test_commit_across_two_brokers_is_visible_to_read_committed(cluster):
    topic = new_topic(cluster)
    p = txn_producer(cluster)
    sent = produce_txn(p, topic, "c", 200)
    got = consume_all(cluster, topic, "read_committed")
    assert values(got) == sent and len(got) == 200
    assert {part for part, _o, _v in got} == {0, 1}
    p.flush(5)


def test_abort_hidden_from_read_committed_but_read_uncommitted_sees_it(cluster):
    topic = new_topic(cluster)
    p = txn_producer(cluster)
    first = produce_txn(p, topic, "a", 50)
    aborted = produce_txn(p, topic, "x", 60, commit=False)
    last = produce_txn(p, topic, "b", 40)
    committed = consume_all(cluster, topic, "read_committed")
    assert values(committed) == first | last and len(committed) == 90
    everything = consume_all(cluster, topic, "read_uncommitted")
    assert values(everything) == first | aborted | last
    # the raw answer: aborted transactions listed for read_committed fetches, markers take offsets
    leader = {b.broker_id: b for b in cluster}[leaders(WireClient(cluster[0].bootstrap), topic, PARTITIONS)[0]]
    with WireClient(leader.bootstrap) as c:
        r = c.request(*_fetch_request(topic, 0, fetch.READ_COMMITTED))
        res = fetch.parse_response(r.buf[r.pos:]).topics[topic][0]
        assert res.error_code == 0 and res.last_stable_offset == res.high_watermark
        assert len(res.aborted_transactions) == 1 and res.aborted_transactions[0][1] == 26  # 25 + a marker
        assert res.high_watermark == 25 + 1 + 30 + 1 + 20 + 1


def _fetch_request(topic: str, partition: int, isolation: int) -> tuple[int, int, bytes]:
    key, version, bufs = fetch.encode_request([(topic, [fetch.FetchPartition(partition, 0, 1 << 20)])], 0, 1, 1 << 20,
                                              isolation_level=isolation)
    return key, version, b"".join(bytes(b) for b in bufs)


def test_open_transaction_holds_back_the_last_stable_offset(cluster):
    topic = new_topic(cluster, 1)
    p = txn_producer(cluster)
    before = produce_txn(p, topic, "before", 10, partitions=1)  # offsets 0-9, marker 10
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"open-{i}".encode(), partition=0)
    assert p.flush(10) == 0  # written to the log, not committed
    with WireClient(cluster[0].bootstrap) as c:
        lead = leaders(c, topic, 1)[0]
    with WireClient({b.broker_id: b for b in cluster}[lead].bootstrap) as c:
        assert list_offsets(c, topic, 0, lo.LATEST_TIMESTAMP)[2] == 16  # read_uncommitted: the HW
        key, version, bufs = lo.encode_request([(topic, [(0, lo.LATEST_TIMESTAMP)])], read_committed=True)
        r = c.request(key, version, b"".join(bytes(b) for b in bufs))
        assert lo.parse_response(r.buf[r.pos:])[topic][0].offset == 11  # read_committed: the LSO
    assert values(consume_all(cluster, topic, "read_committed", 1, idle_s=1.0)) == before
    p.commit_transaction(30)
    got = consume_all(cluster, topic, "read_committed", 1)
    assert values(got) == before | {f"open-{i}".encode() for i in range(5)}


def test_consume_transform_produce_commits_offsets_atomically(cluster):
    src, dst = new_topic(cluster), new_topic(cluster)
    feeder = Producer({"bootstrap.servers": cluster[0].bootstrap, "linger.ms": 5})
    for i in range(300):
        feeder.produce(src, f"in-{i}".encode(), partition=i % PARTITIONS)
    assert feeder.flush(10) == 0
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": cluster[0].bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([src])
    p = txn_producer(cluster)
    seen = 0
    aborted_once = False
    deadline = time.monotonic() + 60
    while seen < 300 and time.monotonic() < deadline:
        msgs = consumer.consume(50, 1.0)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, m.value().replace(b"in-", b"out-"), partition=m.partition())
        p.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                                      30)
        if not aborted_once:  # the first batch is aborted: its output vanishes, its offsets are not committed
            aborted_once = True
            # written before the abort: librdkafka's abort purges what it has not sent yet, and this batch is
            # to be in the log, aborted (checked below)
            assert p.flush(30) == 0
            p.abort_transaction(30)
            committed = consumer.committed([TopicPartition(src, q) for q in range(PARTITIONS)], 10)
            assert all(tp.offset < 0 for tp in committed), committed
            for tp in consumer.assignment():  # re-read the batch (the abort rewinds nothing by itself)
                consumer.seek(TopicPartition(src, tp.partition, 0))
            continue
        p.commit_transaction(30)
        seen += len(msgs)
    assert seen == 300
    committed = consumer.committed([TopicPartition(src, q) for q in range(PARTITIONS)], 10)
    assert sum(tp.offset for tp in committed) == 300
    consumer.close()
    out = consume_all(cluster, dst, "read_committed")
    assert sorted(v for _p, _o, v in out) == sorted(f"out-{i}".encode() for i in range(300))  # each exactly once
    assert len(consume_all(cluster, dst, "read_uncommitted")) > 300  # the aborted batch is in the log


def test_zombie_producer_is_fenced(cluster):
    topic = new_topic(cluster)
    txn_id = f"zombie-{uuid.uuid4().hex[:6]}"
    old = txn_producer(cluster, txn_id)
    old.begin_transaction()
    for i in range(20):
        old.produce(topic, f"zombie-{i}".encode(), partition=i % PARTITIONS)
    assert old.flush(10) == 0
    new = txn_producer(cluster, txn_id)  # same transactional id: fences the old one, aborts its transaction
    with pytest.raises(KafkaException) as info:
        old.commit_transaction(10)
    err = info.value.args[0]
    assert err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH), err
    fresh = produce_txn(new, topic, "new", 20)
    got = consume_all(cluster, topic, "read_committed")
    assert values(got) == fresh  # nothing of the zombie's transaction


def test_ferry_producer_passes_transactions_through_and_audits_only_commits(cluster):
    from ferry.client import Producer as FerryProducer
    from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent

    topic = new_topic(cluster)
    app = f"txn-app-{uuid.uuid4().hex[:6]}"
    p = FerryProducer(cluster[0].bootstrap, application=app, transactional_id=f"ferry-{uuid.uuid4().hex[:6]}",
                      audit_interval_s=0.5)
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(30):
            p.send(topic, f"kept-{i}".encode(), partition=i % PARTITIONS)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(12):
            p.send(topic, f"dropped-{i}".encode(), partition=i % PARTITIONS)
        assert p.flush(10) == 0
        p.abort_transaction()
        assert p.delivered == 30  # only the committed transaction is counted
    finally:
        assert p.close(15) == 0
    got = consume_all(cluster, topic, "read_committed")
    assert values(got) == {f"kept-{i}".encode() for i in range(30)}
    events = [AuditEvent.from_json(v) for _p, _o, v in consume_all(cluster, AUDIT_TOPIC, "read_committed", 1)]
    mine = [e for e in events if e.application == app and e.topic == topic]
    assert sum(e.count for e in mine) == 30, mine


def test_kafka_python_transactional_producer(cluster):
    from kafka import KafkaProducer

    topic = new_topic(cluster)
    p = KafkaProducer(bootstrap_servers=cluster[0].bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:6]}")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(20):
            p.send(topic, f"kp-{i}".encode(), partition=i % PARTITIONS)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(10):
            p.send(topic, f"kpx-{i}".encode(), partition=i % PARTITIONS)
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    assert values(consume_all(cluster, topic, "read_committed")) == {f"kp-{i}".encode() for i in range(20)}
    assert len(consume_all(cluster, topic, "read_uncommitted")) == 30
