"""OffsetForLeaderEpoch (key 23) v0-3: our four functions round-trip, and agree with kafka-python's two
independent codecs (the hand-written schemas of every version, and the classes generated from Kafka's own
JSON message definitions, which start at v2)."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import OffsetForLeaderEpochRequest as GenRequest
from kafka.protocol.consumer import OffsetForLeaderEpochResponse as GenResponse
from kafka.protocol.old import offset_for_leader_epoch as old

from ferry.wire.protocol import offset_for_leader_epoch as ofle
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.primitives import ProtocolError, Reader

VERSIONS = range(0, 4)

TOPICS_REQ = [
    ("events", [ofle.EpochRequestPartition(0, 4, 5), ofle.EpochRequestPartition(7, 0, 5)]),
    ("ü-topic", [ofle.EpochRequestPartition(2, 11, -1)]),
    ("empty", []),
]
TOPICS_RESP = [
    ("events", [ofle.EpochEndOffset(0, 0, 4, 1234), ofle.EpochEndOffset(7, 6, -1, -1)]),
    ("ü-topic", [ofle.EpochEndOffset(2, 0, 9, 1 << 40)]),
    ("empty", []),
]


def _body(encoded) -> bytes:
    return b"".join(bytes(b) for b in encoded[2])


def _expected_request(version: int) -> list:
    return [(name, [ofle.EpochRequestPartition(p.partition, p.leader_epoch,
                                               p.current_leader_epoch if version >= 2 else -1) for p in parts])
            for name, parts in TOPICS_REQ]


def _expected_response(version: int) -> list:
    return [(name, [ofle.EpochEndOffset(p.partition, p.error_code, p.leader_epoch if version >= 1 else -1,
                                        p.end_offset) for p in parts]) for name, parts in TOPICS_RESP]


def test_api_key():
    assert ApiKey.OFFSET_FOR_LEADER_EPOCH == 23


@pytest.mark.parametrize("version", VERSIONS)
def test_request_round_trip(version):
    key, v, buffers = ofle.encode_request(TOPICS_REQ, 3, version)
    assert (key, v) == (ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    r = Reader(_body((key, v, buffers)))
    req = ofle.parse_request(r, version)
    assert r.remaining() == 0
    assert req.topics == _expected_request(version)
    assert req.replica_id == (3 if version >= 3 else ofle.DEBUGGING_REPLICA_ID)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_round_trip(version):
    body = ofle.encode_response(version, TOPICS_RESP, throttle_time_ms=17)
    assert ofle.parse_response(memoryview(body), version) == dict(_expected_response(version))


@pytest.mark.parametrize("version", VERSIONS)
def test_request_matches_kafka_python(version):
    cls = old.OffsetForLeaderEpochRequest[version]
    topics = [(name, [(p.partition, p.current_leader_epoch, p.leader_epoch) if version >= 2
                      else (p.partition, p.leader_epoch) for p in parts]) for name, parts in TOPICS_REQ]
    theirs = bytes(cls(replica_id=3, topics=topics).encode() if version >= 3 else cls(topics=topics).encode())
    assert _body(ofle.encode_request(TOPICS_REQ, 3, version)) == theirs
    r = Reader(theirs)
    assert ofle.parse_request(r, version).topics == _expected_request(version) and r.remaining() == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_response_matches_kafka_python(version):
    ours = ofle.encode_response(version, TOPICS_RESP, throttle_time_ms=17)
    decoded = old.OffsetForLeaderEpochResponse[version].decode(ours)
    assert bytes(decoded.encode()) == ours
    (name, parts), *_ = decoded.topics
    assert name == "events"
    assert parts[0][:2] == (0, 0) and parts[0][-1] == 1234
    if version >= 1:
        assert parts[0][2] == 4


@pytest.mark.parametrize("version", [2, 3])
def test_generated_from_kafkas_json(version):
    """kafka-python's classes generated from Kafka's JSON definitions (v2+): both directions."""
    decode = GenResponse._struct.compiled_decode_from(version, compact=False, tagged=False,
                                                      data_class=GenResponse[None])
    ours = ofle.encode_response(version, TOPICS_RESP)
    d, end = decode(memoryview(ours), 0)
    assert end == len(ours)
    d._header = None
    assert bytes(d.encode(version=version)) == ours
    p = d.topics[0].partitions[0]
    assert (p.partition, p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 4, 1234)

    T = GenRequest.OffsetForLeaderTopic
    req = GenRequest(version=version, replica_id=3, topics=[
        T(topic="events", partitions=[T.OffsetForLeaderPartition(partition=0, current_leader_epoch=5,
                                                                  leader_epoch=4)])])
    r = Reader(bytes(req.encode(version=version)))
    parsed = ofle.parse_request(r, version)
    assert r.remaining() == 0
    assert parsed.topics == [("events", [ofle.EpochRequestPartition(0, 4, 5)])]
    assert parsed.replica_id == (3 if version >= 3 else ofle.DEBUGGING_REPLICA_ID)


def test_default_request_version_is_3_with_the_replica_id():
    key, version, buffers = ofle.encode_request([("t", [ofle.EpochRequestPartition(0, 2, 3)])], 5)
    assert version == ofle.REQUEST_VERSION == 3
    req = ofle.parse_request(Reader(_body((key, version, buffers))), version)
    assert req.replica_id == 5 and req.topics == [("t", [ofle.EpochRequestPartition(0, 2, 3)])]


@pytest.mark.parametrize("version", [-1, 4])
def test_unsupported_versions_are_refused(version):
    with pytest.raises(ValueError):
        ofle.encode_request(TOPICS_REQ, 1, version)
    with pytest.raises(ValueError):
        ofle.encode_response(version, TOPICS_RESP)


def test_truncated_request_is_a_protocol_error():
    body = _body(ofle.encode_request(TOPICS_REQ, 1))
    with pytest.raises(ProtocolError):
        ofle.parse_request(Reader(body[:-2]), 3)
