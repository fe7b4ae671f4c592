"""The codec against an independent one: kafka-python 3 generates its protocol classes from Kafka's own JSON
message definitions. Our responses must decode there and re-encode to the very same bytes (field order,
presence per version, nullability); requests it encodes must parse here to the same values."""

from __future__ import annotations

import pytest
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import (
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

from ferry.wire.protocol import (
    api_versions,
    create_topics,
    fetch,
    find_coordinator,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
)
from ferry.wire.protocol.api_keys import ADVERTISED
from ferry.wire.protocol.primitives import Reader
from tests.wire.flexible_oracle import flexible_body, flexible_roundtrip


def _same_after_roundtrip(cls, ours: bytes, version: int):
    """Decode every byte of `ours` with kafka-python, then re-encode it: the bytes must be identical."""
    decode = cls._struct.compiled_decode_from(version, compact=False, tagged=False, data_class=cls[None])
    decoded, end = decode(memoryview(ours), 0)
    assert end == len(ours), f"{cls.__name__} v{version}: {len(ours) - end} bytes left over"
    decoded._header = None
    assert bytes(decoded.encode(version=version)) == ours, f"{cls.__name__} v{version} re-encodes differently"
    return decoded


# ---------------------------------------------------------------------------------------------------- responses

@pytest.mark.parametrize("version", [0, 1, 2])
def test_api_versions_response(version):
    ours = api_versions.encode_response(version, 0, ADVERTISED)
    d = _same_after_roundtrip(ApiVersionsResponse, ours, version)
    assert {k.api_key: (k.min_version, k.max_version) for k in d.api_keys} == dict(ADVERTISED)


@pytest.mark.parametrize("version", range(0, 9))
def test_metadata_response(version):
    brokers = [metadata.BrokerMetadata(1, "a.example", 9092, "live"), metadata.BrokerMetadata(2, "b", 9093, None)]
    topics = [
        metadata.TopicMetadata(0, "events", [metadata.PartitionMetadata(0, 0, 1, [1], [1], []),
                                             metadata.PartitionMetadata(5, 1, -1, [2], [], [2])]),
        metadata.TopicMetadata(3, "missing", []),
    ]
    ours = metadata.encode_response(version, brokers, "ferry:/c", 1, topics)
    d = _same_after_roundtrip(MetadataResponse, ours, version)
    assert [(b.node_id, b.host, b.port) for b in d.brokers] == [(1, "a.example", 9092), (2, "b", 9093)]
    t = d.topics[0]
    assert t.name == "events" and [(p.partition_index, p.leader_id, p.error_code) for p in t.partitions] == \
        [(0, 1, 0), (1, -1, 5)]
    assert d.topics[1].error_code == 3
    if version >= 1:
        assert d.controller_id == 1 and d.brokers[0].rack == "live"
    if version >= 2:
        assert d.cluster_id == "ferry:/c"


@pytest.mark.parametrize("version", range(0, 9))
def test_produce_response(version):
    results = [("t", [produce.PartitionProduceResult(0, 0, 42, -1, 7),
                      produce.PartitionProduceResult(1, 2, -1, -1, -1, "bad crc")])]
    ours = produce.encode_response(version, results)
    d = _same_after_roundtrip(ProduceResponse, ours, version)
    parts = d.responses[0].partition_responses
    assert [(p.index, p.error_code, p.base_offset) for p in parts] == [(0, 0, 42), (1, 2, -1)]
    if version >= 5:
        assert parts[0].log_start_offset == 7
    if version >= 8:
        assert parts[1].error_message == "bad crc"


@pytest.mark.parametrize("version", range(4, 12))
def test_fetch_response(version):
    records = b"\x00" * 61 + b"payload"
    results = [("t", [fetch.PartitionFetchResult(0, 0, 100, 100, 5, records),
                      fetch.PartitionFetchResult(3, 6, -1, -1, -1, b"")])]
    ours = b"".join(fetch.encode_response(version, results))
    assert fetch.parts_size(fetch.encode_response(version, results)) == len(ours)
    d = _same_after_roundtrip(FetchResponse, ours, version)
    p0, p3 = d.responses[0].partitions
    assert (p0.partition_index, p0.error_code, p0.high_watermark) == (0, 0, 100)
    assert bytes(p0.records) == records
    assert (p3.partition_index, p3.error_code) == (3, 6)
    if version >= 5:
        assert p0.log_start_offset == 5


class _Slice:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)


def test_fetch_response_parts_leave_a_hole_for_sendfile():
    sl = _Slice(b"R" * 100)
    results = [("t", [fetch.PartitionFetchResult(0, 0, 10, 10, 0, sl), fetch.PartitionFetchResult(1, 0, 0, 0, 0, b"")])]
    parts = fetch.encode_response(11, results)
    assert parts[1] is sl and fetch.parts_size(parts) == sum(len(p) for p in parts if p is not sl) + 100
    flat = b"".join(p.data if p is sl else p for p in parts)
    assert bytes(FetchResponse.decode(flat, version=11).responses[0].partitions[0].records) == sl.data


@pytest.mark.parametrize("version", (6, 7))
def test_list_offsets_flexible(version):
    """v6 is flexible; v7 may ask for MAX_TIMESTAMP (-3)."""
    req = ListOffsetsRequest(version=version, replica_id=-1, isolation_level=1, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=2, current_leader_epoch=-1,
                                                                     timestamp=-3)])])
    parsed = list_offsets.parse_request(flexible_body(req, version), version)
    assert (parsed.replica_id, parsed.isolation_level, parsed.topics) == (-1, 1, [("t", [(2, -3)])])
    ours = list_offsets.encode_response(version, [("t", [list_offsets.PartitionOffsetResult(2, 0, 1234, 99)])])
    p = flexible_roundtrip(ListOffsetsResponse, ours, version).topics[0].partitions[0]
    assert (p.partition_index, p.error_code, p.timestamp, p.offset) == (2, 0, 1234, 99)


@pytest.mark.parametrize("version", range(1, 6))
def test_list_offsets_response(version):
    ours = list_offsets.encode_response(version, [("t", [list_offsets.PartitionOffsetResult(0, 0, 1234, 99),
                                                         list_offsets.PartitionOffsetResult(1, 6)])])
    d = _same_after_roundtrip(ListOffsetsResponse, ours, version)
    p = d.topics[0].partitions[0]
    assert (p.partition_index, p.error_code, p.timestamp, p.offset) == (0, 0, 1234, 99)


@pytest.mark.parametrize("version", [0, 1])
def test_init_producer_id_response(version):
    d = _same_after_roundtrip(InitProducerIdResponse, init_producer_id.encode_response(version, 0, 5000, 0), version)
    assert (d.error_code, d.producer_id, d.producer_epoch) == (0, 5000, 0)


def test_find_coordinator_response():
    d = _same_after_roundtrip(FindCoordinatorResponse, find_coordinator.encode_response(0, 15), 0)
    assert d.error_code == 15 and d.node_id == -1


@pytest.mark.parametrize("version", range(0, 5))
def test_create_topics_response(version):
    ours = create_topics.encode_response(version, [("a", 0, None), ("b", 36, "exists")])
    d = _same_after_roundtrip(CreateTopicsResponse, ours, version)
    assert [(t.name, t.error_code) for t in d.topics] == [("a", 0), ("b", 36)]


# ---------------------------------------------------------------------------------------------------- requests

def _body(req, version: int) -> Reader:
    return Reader(bytes(req.encode(version=version)))


@pytest.mark.parametrize("version", range(0, 9))
def test_metadata_request(version):
    topics = [MetadataRequest.MetadataRequestTopic(name="x"), MetadataRequest.MetadataRequestTopic(name="y")]
    r = _body(MetadataRequest(version=version, topics=topics, allow_auto_topic_creation=False), version)
    req = metadata.parse_request(r, version)
    assert req.topics == ["x", "y"] and r.remaining() == 0
    assert req.allow_auto_topic_creation is (version < 4)
    if version >= 1:
        assert metadata.parse_request(_body(MetadataRequest(version=version, topics=None), version), version).topics \
            is None


@pytest.mark.parametrize("version", range(3, 9))
def test_produce_request(version):
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=version, transactional_id=None, acks=-1, timeout_ms=1500, topic_data=[
        T(name="t", partition_data=[T.PartitionProduceData(index=2, records=b"batchbytes"),
                                    T.PartitionProduceData(index=3, records=None)])])
    r = _body(req, version)
    ours = produce.parse_request(r, version)
    assert r.remaining() == 0
    assert (ours.transactional_id, ours.acks, ours.timeout_ms) == (None, -1, 1500)
    (name, parts), = ours.topics
    assert name == "t" and [(p, None if rec is None else bytes(rec)) for p, rec in parts] == \
        [(2, b"batchbytes"), (3, None)]


@pytest.mark.parametrize("version", range(4, 12))
def test_fetch_request(version):
    FT = FetchRequest.FetchTopic
    req = FetchRequest(version=version, replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800,
                       isolation_level=1, session_id=0, session_epoch=-1, topics=[
                           FT(topic="t", partitions=[FT.FetchPartition(partition=1, current_leader_epoch=-1,
                                                                       fetch_offset=77, log_start_offset=-1,
                                                                       partition_max_bytes=1048576)])],
                       forgotten_topics_data=[], rack_id="")
    r = _body(req, version)
    ours = fetch.parse_request(r, version)
    assert r.remaining() == 0
    assert (ours.max_wait_ms, ours.min_bytes, ours.max_bytes, ours.isolation_level) == (500, 1, 52428800, 1)
    (name, (fp,)), = ours.topics
    assert name == "t" and (fp.partition, fp.fetch_offset, fp.max_bytes) == (1, 77, 1048576)


@pytest.mark.parametrize("version", range(1, 6))
def test_list_offsets_request(version):
    LT = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(version=version, replica_id=-1, isolation_level=0, topics=[
        LT(name="t", partitions=[LT.ListOffsetsPartition(partition_index=4, current_leader_epoch=-1, timestamp=-2)])])
    r = _body(req, version)
    ours = list_offsets.parse_request(r, version)
    assert r.remaining() == 0 and ours.topics == [("t", [(4, -2)])]


@pytest.mark.parametrize("version", [0, 1])
def test_init_producer_id_request(version):
    r = _body(InitProducerIdRequest(version=version, transactional_id=None, transaction_timeout_ms=60000), version)
    ours = init_producer_id.parse_request(r, version)
    assert r.remaining() == 0 and (ours.transactional_id, ours.transaction_timeout_ms) == (None, 60000)


def test_find_coordinator_request():
    r = _body(FindCoordinatorRequest(version=0, key="my-group"), 0)
    assert find_coordinator.parse_request(r, 0).key == "my-group" and r.remaining() == 0


@pytest.mark.parametrize("version", range(0, 5))
def test_create_topics_request(version):
    CT = CreateTopicsRequest.CreatableTopic
    req = CreateTopicsRequest(version=version, topics=[
        CT(name="n", num_partitions=3, replication_factor=1, assignments=[],
           configs=[CT.CreatableTopicConfig(name="retention.ms", value="1000")])],
        timeout_ms=5000, validate_only=True)
    r = _body(req, version)
    ours = create_topics.parse_request(r, version)
    assert r.remaining() == 0
    t, = ours.topics
    assert (t.name, t.num_partitions, t.replication_factor, t.configs) == ("n", 3, 1, {"retention.ms": "1000"})
    assert ours.timeout_ms == 5000 and ours.validate_only is (version >= 1)
