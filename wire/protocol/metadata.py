"""Metadata (key 3), versions 0-8: brokers, controller, and every requested topic's partition leaders."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.wire.protocol.primitives import Reader, Writer


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
                w.int32(0)  # leader_epoch: no leader elections without replication
            w.int32_array(p.replicas).int32_array(p.isr)
            if version >= 5:
                w.int32_array(p.offline)
        if version >= 8:
            w.int32(-2147483648)  # topic_authorized_operations: not computed
    if version >= 8:
        w.int32(-2147483648)  # cluster_authorized_operations
    return bytes(w.buf)
