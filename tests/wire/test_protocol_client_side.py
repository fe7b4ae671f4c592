"""The client side of the protocol modules (encode_request / parse_response, request_header) against the
broker side of the same modules: what a client encodes the broker parses to the same values, and what the
broker encodes the client parses back."""

from __future__ import annotations

from ferry.wire.protocol import fetch, init_producer_id, list_offsets, metadata, produce
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import read_request_header, request_header
from ferry.wire.protocol.primitives import Reader


def _reader(buffers) -> Reader:
    return Reader(b"".join(bytes(b) for b in buffers))


def test_request_header_roundtrip():
    header, r = read_request_header(request_header(ApiKey.FETCH, 11, 42, "me") + b"body")
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (1, 11, 42, "me")
    assert r.remaining() == 4


def test_metadata():
    key, version, body = metadata.encode_request(["a", "b"])
    assert (key, version) == (ApiKey.METADATA, metadata.REQUEST_VERSION)
    r = _reader(body)
    req = metadata.parse_request(r, version)
    assert req.topics == ["a", "b"] and req.allow_auto_topic_creation is False and r.remaining() == 0
    assert metadata.parse_request(_reader(metadata.encode_request(None)[2]), version).topics is None
    brokers = [metadata.BrokerMetadata(1, "h", 9092, None)]
    topics = [metadata.TopicMetadata(0, "a", [metadata.PartitionMetadata(0, 0, 1, [1], [1])])]
    md = metadata.parse_response(memoryview(metadata.encode_response(version, brokers, "c", 1, topics)))
    assert md.brokers == {1: brokers[0]} and md.topics == {"a": topics[0]} and md.cluster_id == "c"


def test_fetch():
    key, version, body = fetch.encode_request([("t", [fetch.FetchPartition(3, 77, 1024)])], 500, 1, 1 << 20)
    assert (key, version) == (ApiKey.FETCH, fetch.REQUEST_VERSION)
    r = _reader(body)
    req = fetch.parse_request(r, version)
    assert r.remaining() == 0 and req.replica_id == fetch.CONSUMER_REPLICA_ID
    assert (req.max_wait_ms, req.min_bytes, req.max_bytes) == (500, 1, 1 << 20)
    assert req.topics == [("t", [fetch.FetchPartition(3, 77, 1024)])]
    parts = fetch.encode_response(version, [("t", [fetch.PartitionFetchResult(3, 0, 90, 90, 0, b"records")])])
    resp = fetch.parse_response(memoryview(b"".join(parts)))
    (res,) = resp.topics["t"]
    assert resp.error_code == 0 and (res.partition, res.high_watermark, bytes(res.records)) == (3, 90, b"records")


def test_produce_references_records():
    records = [b"batch-one", bytearray(b"batch-two")]
    key, version, body = produce.encode_request([("t", [(2, records)])], -1, 1500)
    assert (key, version) == (ApiKey.PRODUCE, produce.REQUEST_VERSION)
    assert body[1] is records[0] and body[2] is records[1]  # referenced, not copied
    req = produce.parse_request(_reader(body), version)
    assert (req.acks, req.timeout_ms) == (-1, 1500)
    assert [(p, bytes(rec)) for p, rec in req.topics[0][1]] == [(2, b"batch-onebatch-two")]
    answer = produce.encode_response(version, [("t", [produce.PartitionProduceResult(2, 0, 40)])])
    assert produce.parse_response(memoryview(answer)) == {"t": [produce.PartitionProduceResult(2, 0, 40)]}


def test_list_offsets():
    key, version, body = list_offsets.encode_request([("t", [(4, -2)])])
    assert (key, version) == (ApiKey.LIST_OFFSETS, list_offsets.REQUEST_VERSION)
    r = _reader(body)
    assert list_offsets.parse_request(r, version).topics == [("t", [(4, -2)])] and r.remaining() == 0
    answer = list_offsets.encode_response(version, [("t", [list_offsets.PartitionOffsetResult(4, 0, -1, 12)])])
    assert list_offsets.parse_response(memoryview(answer)) == {"t": [list_offsets.PartitionOffsetResult(4, 0, -1, 12)]}


def test_init_producer_id():
    key, version, body = init_producer_id.encode_request()
    assert (key, version) == (ApiKey.INIT_PRODUCER_ID, init_producer_id.REQUEST_VERSION)
    req = init_producer_id.parse_request(_reader(body), version)
    assert (req.transactional_id, req.transaction_timeout_ms) == (None, 60_000)
    res = init_producer_id.parse_response(memoryview(init_producer_id.encode_response(version, 0, 5000, 0)))
    assert (res.error_code, res.producer_id, res.producer_epoch) == (0, 5000, 0)
