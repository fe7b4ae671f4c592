"""Metadata (key 3), versions 0-12: brokers, controller, and every requested topic's partition leaders.
v9+ are flexible (KIP-482); v10+ carry topic ids (KIP-516) which KIP-848 consumers need to name their
assigned topics; v12 lets a request name a topic by id alone. The client side (`encode_request`,
`parse_response`) speaks v8."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ferry.wire.protocol import flexible
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import ProtocolError, Reader, Writer

REQUEST_VERSION = 8  # what clients send
NO_TOPIC_ID = bytes(16)  # Kafka's Uuid.ZERO_UUID


@dataclass(slots=True)
class MetadataRequest:
    topics: list[str] | None  # None = all topics
    allow_auto_topic_creation: bool = True
    topic_ids: list[bytes] = field(default_factory=list)  # v12: topics asked for by id alone (no name)


def _flexible_topic(r: Reader, version: int) -> tuple[bytes, str | None]:
    topic_id = r.raw(16) if version >= 10 else NO_TOPIC_ID
    name = flexible.compact_nullable_string(r)
    flexible.skip_tagged_fields(r)
    return topic_id, name


def _parse_flexible(r: Reader, version: int) -> MetadataRequest:
    flexible.request_body(r)
    entries = flexible.compact_array(r, lambda r: _flexible_topic(r, version))
    auto = r.boolean()
    if version <= 10:
        r.boolean()  # include_cluster_authorized_operations
    r.boolean()  # include_topic_authorized_operations
    flexible.skip_tagged_fields(r)
    if entries is None:
        return MetadataRequest(None, auto)
    names = [n for _, n in entries if n is not None]
    ids = [i for i, n in entries if n is None]
    if ids and version < 12:
        raise ProtocolError(f"Metadata v{version} names a topic by id only (v12+ may)")
    return MetadataRequest(names, auto, ids)


def parse_request(r: Reader, version: int) -> MetadataRequest:
    if version >= 9:
        return _parse_flexible(r, version)
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
    topic_id: bytes = NO_TOPIC_ID  # v10+
    name_known: bool = True  # False: asked by an unknown id (v12 answers a null name)


def encode_response(version: int, brokers: list[BrokerMetadata], cluster_id: str | None, controller_id: int,
                    topics: list[TopicMetadata]) -> bytes:
    if version >= 9:
        return _encode_flexible(version, brokers, cluster_id, controller_id, topics)
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
        w.error_code(t.error_code).string(t.name)
        if version >= 1:
            w.boolean(t.is_internal)
        w.array_len(len(t.partitions))
        for p in t.partitions:
            w.error_code(p.error_code).int32(p.partition).int32(p.leader)
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


def _encode_flexible(version: int, brokers: list[BrokerMetadata], cluster_id: str | None, controller_id: int,
                     topics: list[TopicMetadata]) -> bytes:
    w = flexible.response_writer().int32(0)  # throttle_time_ms

    def broker(w: Writer, b: BrokerMetadata) -> None:
        w.int32(b.node_id)
        flexible.put_compact_string(w, b.host)
        w.int32(b.port)
        flexible.put_compact_string(w, b.rack)
        flexible.put_tagged_fields(w)

    def partition(w: Writer, p: PartitionMetadata) -> None:
        w.error_code(p.error_code).int32(p.partition).int32(p.leader).int32(p.leader_epoch)
        for nodes in (p.replicas, p.isr, p.offline):
            flexible.put_compact_array(w, nodes, Writer.int32)
        flexible.put_tagged_fields(w)

    def topic(w: Writer, t: TopicMetadata) -> None:
        w.error_code(t.error_code)
        flexible.put_compact_string(w, t.name if t.name_known or version < 12 else None)
        if version >= 10:
            w.raw(t.topic_id)
        w.boolean(t.is_internal)
        flexible.put_compact_array(w, t.partitions, partition)
        w.int32(-2147483648)  # topic_authorized_operations: not computed
        flexible.put_tagged_fields(w)

    flexible.put_compact_array(w, brokers, broker)
    flexible.put_compact_string(w, cluster_id)
    w.int32(controller_id)
    flexible.put_compact_array(w, topics, topic)
    if version <= 10:
        w.int32(-2147483648)  # cluster_authorized_operations
    return bytes(flexible.put_tagged_fields(w).buf)


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
