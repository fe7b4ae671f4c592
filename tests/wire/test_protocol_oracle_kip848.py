"""Metadata v9-12 (flexible; topic ids, which KIP-848 members need) against kafka-python 3's generated codecs,
and ferry's ConsumerGroupHeartbeat/ConsumerGroupDescribe codecs against their Kafka schemas' field order
(kafka-python has no codec for those two: the bytes are written here by hand from the schema)."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from ferry.wire.protocol import (
    consumer_group_describe,
    consumer_group_heartbeat,
    flexible,
    list_groups,
    metadata,
)
from ferry.wire.protocol.primitives import ProtocolError, Reader, Writer
from tests.wire.flexible_oracle import flexible_body, flexible_roundtrip

TOPIC_ID = uuid.uuid4()


@pytest.mark.parametrize("version", range(9, 13))
def test_metadata_response_flexible_with_topic_ids(version):
    brokers = [metadata.BrokerMetadata(1, "a.example", 9092, "live"), metadata.BrokerMetadata(2, "b", 9093, None)]
    topics = [metadata.TopicMetadata(0, "events", [metadata.PartitionMetadata(0, 0, 1, [1, 2], [1], [2], 4)],
                                     topic_id=TOPIC_ID.bytes),
              metadata.TopicMetadata(3, "missing", [])]
    d = flexible_roundtrip(MetadataResponse, metadata.encode_response(version, brokers, "ferry:/c", 1, topics),
                           version)
    assert [(b.node_id, b.host, b.port, b.rack) for b in d.brokers] == [(1, "a.example", 9092, "live"),
                                                                       (2, "b", 9093, None)]
    t = d.topics[0]
    assert (t.name, t.error_code, d.topics[1].error_code, d.controller_id, d.cluster_id) == \
        ("events", 0, 3, 1, "ferry:/c")
    p = t.partitions[0]
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes, p.offline_replicas) == (1, 4, [1, 2], [1], [2])
    if version >= 10:
        assert t.topic_id == TOPIC_ID


@pytest.mark.parametrize("version", range(9, 13))
def test_metadata_request_flexible(version):
    topics = [MetadataRequest.MetadataRequestTopic(name="x"), MetadataRequest.MetadataRequestTopic(name="y")]
    r = flexible_body(MetadataRequest(version=version, topics=topics, allow_auto_topic_creation=False), version)
    req = metadata.parse_request(r, version)
    assert (req.topics, req.allow_auto_topic_creation, req.topic_ids, r.remaining()) == (["x", "y"], False, [], 0)
    everything = flexible_body(MetadataRequest(version=version, topics=None), version)
    assert metadata.parse_request(everything, version).topics is None


def test_metadata_request_by_topic_id_v12_only():
    by_id = [MetadataRequest.MetadataRequestTopic(topic_id=TOPIC_ID, name=None)]
    req = metadata.parse_request(flexible_body(MetadataRequest(version=12, topics=by_id), 12), 12)
    assert (req.topics, req.topic_ids) == ([], [TOPIC_ID.bytes])
    with pytest.raises(ProtocolError, match="by id"):
        metadata.parse_request(flexible_body(MetadataRequest(version=11, topics=by_id), 11), 11)
    unknown = metadata.TopicMetadata(100, "", [], topic_id=TOPIC_ID.bytes, name_known=False)
    d = flexible_roundtrip(MetadataResponse, metadata.encode_response(12, [], None, 1, [unknown]), 12)
    assert (d.topics[0].name, d.topics[0].error_code, d.topics[0].topic_id) == (None, 100, TOPIC_ID)


def _heartbeat_body(version: int, regex: str | None = None) -> Reader:
    """ConsumerGroupHeartbeatRequest's fields in the schema's order (v1 adds SubscribedTopicRegex)."""
    w = Writer()
    flexible.put_tagged_fields(w)  # request header v2's tagged fields
    flexible.put_compact_string(w, "g")
    flexible.put_compact_string(w, "m-1")
    w.int32(3)
    flexible.put_compact_string(w, None)  # instance id
    flexible.put_compact_string(w, "rack-a")
    w.int32(30_000)
    flexible.put_compact_array(w, ["t1", "t2"], flexible.put_compact_string)
    if version >= 1:
        flexible.put_compact_string(w, regex)
    flexible.put_compact_string(w, "range")

    def tps(w: Writer, tp: tuple[bytes, list[int]]) -> None:
        w.raw(tp[0])
        flexible.put_compact_array(w, tp[1], Writer.int32)
        flexible.put_tagged_fields(w)

    flexible.put_compact_array(w, [(TOPIC_ID.bytes, [0, 2])], tps)
    flexible.put_tagged_fields(w)
    return Reader(bytes(w.buf))


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_request(version):
    r = _heartbeat_body(version)
    req = consumer_group_heartbeat.parse_request(r, version)
    assert r.remaining() == 0
    assert (req.group_id, req.member_id, req.member_epoch, req.instance_id, req.rack_id, req.rebalance_timeout_ms,
            req.subscribed_topic_names, req.server_assignor, req.owned) == \
        ("g", "m-1", 3, None, "rack-a", 30_000, ["t1", "t2"], "range", [(TOPIC_ID.bytes, [0, 2])])


def test_heartbeat_response_with_and_without_assignment():
    body = consumer_group_heartbeat.encode_response(0, None, "m-1", 7, 500, [(TOPIC_ID.bytes, [1, 4])])
    r = Reader(body)
    flexible.skip_tagged_fields(r)  # response header v1
    assert (r.int32(), r.int16(), flexible.compact_nullable_string(r), flexible.compact_string(r), r.int32(),
            r.int32(), r.int8()) == (0, 0, None, "m-1", 7, 500, 1)
    tp = flexible.compact_array(r, lambda r: (r.raw(16), flexible.compact_array(r, Reader.int32),
                                              flexible.skip_tagged_fields(r))[:2])
    flexible.skip_tagged_fields(r)  # the assignment struct's
    flexible.skip_tagged_fields(r)
    assert tp == [(TOPIC_ID.bytes, [1, 4])] and r.remaining() == 0
    unchanged = Reader(consumer_group_heartbeat.encode_response(25, "gone", None, -1, 500))
    flexible.skip_tagged_fields(unchanged)
    assert (unchanged.int32(), unchanged.int16(), flexible.compact_nullable_string(unchanged),
            flexible.compact_nullable_string(unchanged), unchanged.int32(), unchanged.int32(), unchanged.int8()) == \
        (0, 25, "gone", None, -1, 500, -1)


def test_describe_request_and_response():
    w = Writer()
    flexible.put_tagged_fields(w)
    flexible.put_compact_array(w, ["g1", "g2"], flexible.put_compact_string)
    w.boolean(False)
    flexible.put_tagged_fields(w)
    r = Reader(bytes(w.buf))
    assert consumer_group_describe.parse_request(r, 0) == ["g1", "g2"] and r.remaining() == 0
    member = consumer_group_describe.ConsumerGroupMember("m", None, None, 4, "c", "/127.0.0.1", ["t"], "t.*",
                                                     [(TOPIC_ID.bytes, "t", [0])], [(TOPIC_ID.bytes, "t", [0, 1])])
    body = consumer_group_describe.encode_response([consumer_group_describe.ConsumerGroupDescription(
        0, "g1", None, "Reconciling", 5, 5, "uniform", [member])])
    r = Reader(body)
    flexible.skip_tagged_fields(r)
    assert (r.int32(), flexible.uvarint(r), r.int16(), flexible.compact_nullable_string(r), flexible.compact_string(r),
            flexible.compact_string(r), r.int32(), r.int32(), flexible.compact_string(r), flexible.uvarint(r)) == \
        (0, 2, 0, None, "g1", "Reconciling", 5, 5, "uniform", 2)
    assert (flexible.compact_string(r), flexible.compact_nullable_string(r), flexible.compact_nullable_string(r),
            r.int32(), flexible.compact_string(r), flexible.compact_string(r),
            flexible.compact_array(r, flexible.compact_string), flexible.compact_nullable_string(r)) == \
        ("m", None, None, 4, "c", "/127.0.0.1", ["t"], "t.*")


def test_list_groups_v5_types():
    """v5 (KIP-848) filters by group type and lists it: "consumer" for KIP-848 groups, "classic" for the others."""
    req = ListGroupsRequest(version=5, states_filter=[], types_filter=["Consumer"])
    states, types = list_groups.parse_filters(flexible_body(req, 5), 5)
    assert (states, types) == (None, frozenset({"consumer"}))
    groups = [("a", "consumer", "Stable"), ("b", "consumer", "Empty")]
    d = flexible_roundtrip(ListGroupsResponse, list_groups.encode_response(5, 0, groups, None, None,
                                                                         frozenset({"a"})), 5)
    assert [(g.group_id, g.group_state, g.group_type) for g in d.groups] == [("a", "Stable", "consumer"),
                                                                             ("b", "Empty", "classic")]
    d = flexible_roundtrip(ListGroupsResponse, list_groups.encode_response(5, 0, groups, None, types,
                                                                         frozenset({"a"})), 5)
    assert [g.group_id for g in d.groups] == ["a"]
