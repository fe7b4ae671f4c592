"""Metadata (key 3), versions 0-8: brokers, controller, and every requested topic's partition leaders.
The client side (`encode_request`, `parse_response`) speaks v8."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer

REQUEST_VERSION = 8  # what clients send


@dataclass(slots=True)
class MetadataRequest:
    topics: list[str] | None  # None = all topics
    allow_auto_topic_creation: bool = True


def parse_request(r: Reader, version: int) -> MetadataRequest:
    topics = r.nullable_array(Reader.string)
    if version == 0 and not topics:
        topics = None  # v0: an empty list means "all topics"
    auto = True
    if version >= 4:
        auto = r.boolean()
    if version >= 8:
        r.boolean()  # include_cluster_authorized_operations
        r.boolean()  # include_topic_authorized_operations
    return MetadataRequest(topics, auto)


@dataclass(slots=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class PartitionMetadata:
    error_code: int
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline: list[int] = field(default_factory=list)
    leader_epoch: int = 0


@dataclass(slots=True)
class TopicMetadata:
    error_code: int
    name: str
    partitions: list[PartitionMetadata]
    is_internal: bool = False


def encode_response(version: int, brokers: list[BrokerMetadata], cluster_id: str | None, controller_id: int,
                    topics: list[TopicMetadata]) -> bytes:
    w = Writer()
    if version >= 3:
        w.int32(0)  # throttle_time_ms
    w.array_len(len(brokers))
    for b in brokers:
        w.int32(b.node_id).string(b.host).int32(b.port)
        if version >= 1:
            w.string(b.rack)
    if version >= 2:
        w.string(cluster_id)
    if version >= 1:
        w.int32(controller_id)
    w.array_len(len(topics))
    for t in topics:
        w.int16(t.error_code).string(t.name)
        if version >= 1:
            w.boolean(t.is_internal)
        w.array_len(len(t.partitions))
        for p in t.partitions:
            w.int16(p.error_code).int32(p.partition).int32(p.leader)
            if version >= 7:
                w.int32(p.leader_epoch)
            w.int32_array(p.replicas).int32_array(p.isr)
            if version >= 5:
                w.int32_array(p.offline)
        if version >= 8:
            w.int32(-2147483648)  # topic_authorized_operations: not computed
    if version >= 8:
        w.int32(-2147483648)  # cluster_authorized_operations
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side


def encode_request(topics: Sequence[str] | None) -> tuple[int, int, Buffers]:
    """Metadata v8 for ``topics`` (None = every topic); never asks the broker to create topics."""
    w = Writer().string_array(topics)
    w.boolean(False)  # allow_auto_topic_creation
    w.boolean(False).boolean(False)  # include cluster/topic authorized operations
    return ApiKey.METADATA, REQUEST_VERSION, [w.buf]


@dataclass(slots=True)
class MetadataResponse:
    brokers: dict[int, BrokerMetadata]
    controller_id: int
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    cluster_id: str | None = None


def parse_response(body: memoryview, version: int = REQUEST_VERSION) -> MetadataResponse:
    """A Metadata answer (after the correlation id), brokers and topics keyed by id and name."""
    r = Reader(body)
    if version >= 3:
        r.int32()  # throttle
    brokers = {}
    for _ in range(max(r.array_len(), 0)):
        node_id, host, port = r.int32(), r.string(), r.int32()
        rack = r.nullable_string() if version >= 1 else None
        brokers[node_id] = BrokerMetadata(node_id, host, port, rack)
    cluster_id = r.nullable_string() if version >= 2 else None
    controller = r.int32() if version >= 1 else -1
    topics = {}
    for _ in range(max(r.array_len(), 0)):
        t_err, name = r.int16(), r.string()
        internal = r.boolean() if version >= 1 else False
        parts = []
        for _ in range(max(r.array_len(), 0)):
            p_err, partition, leader = r.int16(), r.int32(), r.int32()
            if version >= 7:
                r.int32()  # leader epoch
            replicas, isr = r.int32_array(), r.int32_array()
            offline = r.int32_array() if version >= 5 else []
            parts.append(PartitionMetadata(p_err, partition, leader, replicas, isr, offline))
        if version >= 8:
            r.int32()  # topic authorized operations
        topics[name] = TopicMetadata(t_err, name, parts, internal)
    return MetadataResponse(brokers, controller, topics, cluster_id)
