"""The raw wire client against a real broker: metadata, pipelined produce, fetch, ListOffsets, failures."""

from __future__ import annotations

import pytest
from kafka.record import MemoryRecords
from mirror_batches import build_batch, records
from mirror_harness import wait_partitions

from ferry.client.errors import BrokerUnavailableError
from ferry.client.wire_client import WireClient, parse_bootstrap
from ferry.mirror.batch_rewrite import forward_batches
from ferry.wire.protocol import fetch, produce
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.fetch import FetchPartition
from ferry.zk.cluster_registry import ClusterRegistry

T0 = 1_700_000_000_000


def test_bootstrap_strings_are_checked() -> None:
    assert parse_bootstrap("a:1, b:22") == [("a", 1), ("b", 22)]
    for bad in ("a", "a:", ":1", "a:x"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


def test_produce_fetch_and_offsets_through_the_wire_client(cluster_factory) -> None:
    c = cluster_factory(1, "live")
    with ClusterRegistry(c.zk_connect) as reg:
        reg.create_topic("t", 2)
    wait_partitions(c.bootstrap, "t", 2)
    wc = WireClient(c.bootstrap, "test")
    try:
        md = wc.refresh_metadata(["t", "missing"])
        assert set(md.brokers) == {1} and wc.leaders == {("t", 0): 1, ("t", 1): 1}
        assert md.topics["missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        pid, epoch = wc.init_producer_id()
        conn = wc.connection(1)

        # three pipelined produce requests, answered in order; each batch stamped by forward_batches
        seq = 0
        sent = []
        for i in range(3):
            fw = forward_batches(build_batch(records(10, T0 + i), 0, "lz4"), 0, pid, epoch, seq)
            seq = fw.next_sequence
            sent.append(fw.records)
            conn.send(*produce.encode_request([("t", [(0, fw.records)])], -1, 10_000))
        assert conn.in_flight == 3
        bases = [produce.parse_response(conn.receive())["t"][0] for _ in range(3)]
        assert [(r.error_code, r.base_offset) for r in bases] == [(0, 0), (0, 10), (0, 20)]

        # a retry of the last batch is recognised by the broker (same producer id and sequence)
        conn.send(*produce.encode_request([("t", [(0, sent[-1])])], -1, 10_000))
        again = produce.parse_response(conn.receive())["t"][0]
        assert (again.error_code, again.base_offset) == (0, 20)

        offsets = wc.list_offsets({("t", 0): -2, ("t", 0 + 1): -1})
        assert offsets[("t", 0)].offset == 0 and offsets[("t", 1)].offset == 0
        assert wc.list_offsets({("t", 0): -1})[("t", 0)].offset == 30

        conn.send(*fetch.encode_request([("t", [FetchPartition(0, 10, 1 << 20), FetchPartition(1, 0, 1 << 20)])],
                                 100, 1, 1 << 20))
        resp = fetch.parse_response(conn.receive())
        p0, p1 = sorted(resp.topics["t"], key=lambda r: r.partition)
        assert (p0.error_code, p0.high_watermark, p1.high_watermark) == (0, 30, 0)
        mr = MemoryRecords(bytes(p0.records))
        firsts = []
        while mr.has_next():
            firsts.append(mr.next_batch().base_offset)
        assert firsts == [10, 20]  # whole batches from the one holding offset 10

        conn.send(*fetch.encode_request([("t", [FetchPartition(0, 99, 1 << 20)])], 0, 1, 1 << 20))
        assert fetch.parse_response(conn.receive()).topics["t"][0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE

        # a broker that went away: a clear error, and the connection can be used again once it is back
        c.brokers[1].stop()
        with pytest.raises(BrokerUnavailableError):
            conn.request(*fetch.encode_request([("t", [FetchPartition(0, 0, 1024)])], 0, 1, 1024))
        with pytest.raises(BrokerUnavailableError):
            wc.refresh_metadata(["t"])
        c.brokers[1].start()
        wait_partitions(c.bootstrap, "t", 2)
        assert wc.list_offsets({("t", 0): -1})[("t", 0)].offset == 30
    finally:
        wc.close()
