"""Client side of the wire codec: parse the responses to `raw_requests` (non-flexible versions).

Fetched record bytes are returned as memoryviews into the response buffer: the mirror rewrites them into
its own buffer, so nothing is copied twice. The result types are the broker codec's dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.wire.protocol.fetch import PartitionFetchResult
from ferry.wire.protocol.list_offsets import PartitionOffsetResult
from ferry.wire.protocol.metadata import BrokerMetadata, PartitionMetadata, TopicMetadata
from ferry.wire.protocol.primitives import Reader
from ferry.wire.protocol.produce import PartitionProduceResult


@dataclass(slots=True)
class MetadataResponse:
    brokers: dict[int, BrokerMetadata]
    controller_id: int
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    cluster_id: str | None = None


def parse_metadata(body: memoryview, version: int = 8) -> MetadataResponse:
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


@dataclass(slots=True)
class FetchResponse:
    error_code: int
    topics: dict[str, list[PartitionFetchResult]]


def parse_fetch(body: memoryview, version: int = 11) -> FetchResponse:
    r = Reader(body)
    r.int32()  # throttle
    error_code = 0
    if version >= 7:
        error_code = r.int16()
        r.int32()  # session id
    topics: dict[str, list[PartitionFetchResult]] = {}
    for _ in range(max(r.array_len(), 0)):
        name = r.string()
        results = topics.setdefault(name, [])
        for _ in range(max(r.array_len(), 0)):
            partition, err, hw = r.int32(), r.int16(), r.int64()
            lso = r.int64() if version >= 4 else -1
            log_start = r.int64() if version >= 5 else -1
            if version >= 4:
                for _ in range(max(r.array_len(), 0)):  # aborted transactions
                    r.int64()
                    r.int64()
            if version >= 11:
                r.int32()  # preferred read replica
            records = r.nullable_bytes()
            results.append(PartitionFetchResult(partition, err, hw, lso, log_start, records))
    return FetchResponse(error_code, topics)


def parse_produce(body: memoryview, version: int = 8) -> dict[str, list[PartitionProduceResult]]:
    r = Reader(body)
    out: dict[str, list[PartitionProduceResult]] = {}
    for _ in range(max(r.array_len(), 0)):
        name = r.string()
        results = out.setdefault(name, [])
        for _ in range(max(r.array_len(), 0)):
            partition, err, base = r.int32(), r.int16(), r.int64()
            append_time = r.int64() if version >= 2 else -1
            log_start = r.int64() if version >= 5 else -1
            message = None
            if version >= 8:
                for _ in range(max(r.array_len(), 0)):  # record errors
                    r.int32()
                    r.nullable_string()
                message = r.nullable_string()
            results.append(PartitionProduceResult(partition, err, base, append_time, log_start, message))
    return out


def parse_list_offsets(body: memoryview, version: int = 5) -> dict[str, list[PartitionOffsetResult]]:
    r = Reader(body)
    if version >= 2:
        r.int32()  # throttle
    out: dict[str, list[PartitionOffsetResult]] = {}
    for _ in range(max(r.array_len(), 0)):
        name = r.string()
        results = out.setdefault(name, [])
        for _ in range(max(r.array_len(), 0)):
            partition, err, ts, offset = r.int32(), r.int16(), r.int64(), r.int64()
            if version >= 4:
                r.int32()  # leader epoch
            results.append(PartitionOffsetResult(partition, err, ts, offset))
    return out


@dataclass(slots=True, frozen=True)
class InitProducerIdResponse:
    error_code: int
    producer_id: int
    producer_epoch: int


def parse_init_producer_id(body: memoryview, version: int = 1) -> InitProducerIdResponse:
    r = Reader(body)
    r.int32()  # throttle
    return InitProducerIdResponse(r.int16(), r.int64(), r.int16())
