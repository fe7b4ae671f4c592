"""The loads read committed data (issue 17): split ends are last stable offsets, an open transaction's records
wait until it ends, an aborted one's are never loaded — against a real broker and librdkafka's transactional
producer, through the split reader every load uses (no Spark needed for the reader itself)."""

from __future__ import annotations

from confluent_kafka import Producer

from ferry.client.message_set_consumer import MessageSetConsumer
from ferry.client.wire_client import WireClient
from ferry.loaders.cluster_offsets import ClusterOffsets
from ferry.loaders.datasource import OffsetSplit, read_split
from ferry.wire.protocol.list_offsets import LATEST_TIMESTAMP
from tests.loaders.conftest import create_topic


def _send(p: Producer, topic: str, tag: str, n: int) -> None:
    for i in range(n):
        p.produce(topic, value=f"{tag}-{i}".encode(), partition=0)
    p.flush(30)


def _values(split: OffsetSplit, bootstrap: str) -> list[bytes]:
    return [v for batch in read_split(split, bootstrap, 15.0, 1000) for v in batch.column("value").to_pylist()]


def _high_watermark(bootstrap: str, topic: str) -> int:
    client = WireClient(bootstrap, client_id="test-hw", timeout_s=10)
    try:
        return client.offsets({(topic, 0): LATEST_TIMESTAMP})[(topic, 0)]
    finally:
        client.close()


def test_split_reader_loads_committed_transactions_only(offline) -> None:
    topic = create_topic(offline, partitions=1, prefix="txn")
    tx = Producer({"bootstrap.servers": offline.bootstrap, "transactional.id": f"load-{topic}", "linger.ms": 5})
    plain = Producer({"bootstrap.servers": offline.bootstrap, "linger.ms": 5})
    tx.init_transactions(30)
    tx.begin_transaction()
    _send(tx, topic, "a", 20)
    tx.commit_transaction(30)
    _send(plain, topic, "p", 5)
    tx.begin_transaction()
    _send(tx, topic, "b", 15)
    tx.abort_transaction(30)
    tx.begin_transaction()
    _send(tx, topic, "c", 10)
    tx.commit_transaction(30)
    tx.begin_transaction()
    _send(tx, topic, "d", 7)  # still open when the load plans

    with ClusterOffsets(bootstrap=offline.bootstrap) as cluster:
        stable = cluster.watermarks(topic, 0).high
    assert stable < _high_watermark(offline.bootstrap, topic), "the open transaction should hold the LSO back"
    got = _values(OffsetSplit(0, topic, 0, 0, stable), offline.bootstrap)
    assert got == [f"a-{i}".encode() for i in range(20)] + [f"p-{i}".encode() for i in range(5)] + \
        [f"c-{i}".encode() for i in range(10)]

    # a read_uncommitted reader of the same range would have loaded the aborted records
    with MessageSetConsumer(offline.bootstrap, topic, 0, 0, stop_at_end=True) as raw:
        everything = [r.value for s in raw.message_sets() for r in s.records() if r.offset < stable]
    assert sum(v.startswith(b"b-") for v in everything) == 15

    tx.commit_transaction(30)
    with ClusterOffsets(bootstrap=offline.bootstrap) as cluster:
        end = cluster.watermarks(topic, 0).high
    assert end == _high_watermark(offline.bootstrap, topic)
    assert _values(OffsetSplit(1, topic, 0, stable, end), offline.bootstrap) == [f"d-{i}".encode() for i in range(7)]
