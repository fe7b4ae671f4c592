"""DescribeProducers (key 61, KIP-664), version 0 (flexible): the active producers of partitions at their leader:
producer id and epoch, last sequence and append time, and the first offset of an open transaction (-1: none)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.wire.protocol import flexible
from ferry.wire.protocol.primitives import Reader, Writer


def parse_request(r: Reader, version: int) -> list[tuple[str, list[int]]]:
    def topic(r: Reader) -> tuple[str, list[int]]:
        name = flexible.compact_string(r)
        parts = flexible.compact_array(r, lambda r: r.int32()) or []
        flexible.skip_tagged_fields(r)
        return name, parts

    flexible.request_body(r)
    topics = flexible.compact_array(r, topic) or []
    flexible.skip_tagged_fields(r)
    return topics


@dataclass(frozen=True)
class ActiveProducer:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1


@dataclass
class PartitionProducers:
    partition: int
    error_code: int = 0
    error_message: str | None = None
    producers: list[ActiveProducer] = field(default_factory=list)


def encode_response(topics: list[tuple[str, list[PartitionProducers]]]) -> bytes:
    def producer(w: Writer, p: ActiveProducer) -> None:
        w.int64(p.producer_id).int32(p.producer_epoch).int32(p.last_sequence).int64(p.last_timestamp)
        w.int32(p.coordinator_epoch).int64(p.current_txn_start_offset)
        flexible.put_tagged_fields(w)

    def partition(w: Writer, p: PartitionProducers) -> None:
        w.int32(p.partition).error_code(p.error_code)
        flexible.put_compact_string(w, p.error_message)
        flexible.put_compact_array(w, p.producers, producer)
        flexible.put_tagged_fields(w)

    def topic(w: Writer, t: tuple[str, list[PartitionProducers]]) -> None:
        flexible.put_compact_string(w, t[0])
        flexible.put_compact_array(w, t[1], partition)
        flexible.put_tagged_fields(w)

    w = flexible.response_writer().int32(0)
    flexible.put_compact_array(w, topics, topic)
    return bytes(flexible.put_tagged_fields(w).buf)
