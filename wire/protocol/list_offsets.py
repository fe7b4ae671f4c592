"""ListOffsets (key 2), versions 1-7: timestamp -2 = earliest, -1 = latest, -3 (v7, KIP-734) = the batch with the
largest timestamp, otherwise the first offset whose batch has a timestamp at or after it. v6+ is flexible. The
client side (`encode_request`, `parse_response`) speaks v5."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ferry.wire.protocol import flexible
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.fetch import CONSUMER_REPLICA_ID, READ_COMMITTED, READ_UNCOMMITTED
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer

REQUEST_VERSION = 5  # what clients send

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
MAX_TIMESTAMP_VERSION = 7
FLEXIBLE = 6


@dataclass(slots=True)
class ListOffsetsRequest:
    replica_id: int
    isolation_level: int
    topics: list[tuple[str, list[tuple[int, int]]]]  # [(topic, [(partition, timestamp)])]


def parse_request(r: Reader, version: int) -> ListOffsetsRequest:
    if version >= FLEXIBLE:
        return _parse_flexible(flexible.request_body(r))
    replica_id = r.int32()
    isolation = r.int8() if version >= 2 else 0

    def partition(r: Reader) -> tuple[int, int]:
        p = r.int32()
        if version >= 4:
            r.int32()  # current_leader_epoch
        return p, r.int64()

    return ListOffsetsRequest(replica_id, isolation, r.topic_array(partition))


def _parse_flexible(r: Reader) -> ListOffsetsRequest:
    replica_id, isolation = r.int32(), r.int8()

    def partition(r: Reader) -> tuple[int, int]:
        p = r.int32()
        r.int32()  # current_leader_epoch
        ts = r.int64()
        flexible.skip_tagged_fields(r)
        return p, ts

    def topic(r: Reader) -> tuple[str, list[tuple[int, int]]]:
        name = flexible.compact_string(r)
        parts = flexible.compact_array(r, partition) or []
        flexible.skip_tagged_fields(r)
        return name, parts

    topics = flexible.compact_array(r, topic) or []
    flexible.skip_tagged_fields(r)
    return ListOffsetsRequest(replica_id, isolation, topics)


@dataclass(slots=True)
class PartitionOffsetResult:
    """One partition's answer: the offset found for the asked timestamp, or an error."""

    partition: int
    error_code: int = 0
    timestamp: int = -1
    offset: int = -1


def encode_response(version: int, topics: list[tuple[str, list[PartitionOffsetResult]]]) -> bytes:
    def partition(w: Writer, p: PartitionOffsetResult) -> None:
        w.int32(p.partition).error_code(p.error_code).int64(p.timestamp).int64(p.offset)
        if version >= 4:
            w.int32(0 if p.offset >= 0 else -1)  # leader_epoch

    if version >= FLEXIBLE:
        def flexible_partition(w: Writer, p: PartitionOffsetResult) -> None:
            partition(w, p)
            flexible.put_tagged_fields(w)

        def topic(w: Writer, t: tuple[str, list[PartitionOffsetResult]]) -> None:
            flexible.put_compact_string(w, t[0])
            flexible.put_compact_array(w, t[1], flexible_partition)
            flexible.put_tagged_fields(w)

        w = flexible.response_writer().int32(0)  # throttle_time_ms
        return bytes(flexible.put_tagged_fields(flexible.put_compact_array(w, topics, topic)).buf)
    w = Writer()
    if version >= 2:
        w.int32(0)  # throttle_time_ms
    return bytes(w.topic_array(topics, partition).buf)


# ---------------------------------------------------------------------- client side


def encode_request(topics: Iterable[tuple[str, Sequence[tuple[int, int]]]], read_committed: bool = False
                   ) -> tuple[int, int, Buffers]:
    """ListOffsets v5: [(topic, [(partition, timestamp)])]; timestamp -2 earliest, -1 latest (read_committed:
    the last stable offset)."""
    isolation = READ_COMMITTED if read_committed else READ_UNCOMMITTED
    w = Writer().int32(CONSUMER_REPLICA_ID).int8(isolation).topic_array(list(topics), _request_partition)
    return ApiKey.LIST_OFFSETS, REQUEST_VERSION, [w.buf]


def _request_partition(w: Writer, partition_timestamp: tuple[int, int]) -> None:
    partition, timestamp = partition_timestamp
    w.int32(partition).int32(-1).int64(timestamp)  # current_leader_epoch unknown


def parse_response(body: memoryview, version: int = REQUEST_VERSION) -> dict[str, list[PartitionOffsetResult]]:
    """A ListOffsets answer (after the correlation id): {topic: [PartitionOffsetResult]}."""
    def partition(r: Reader) -> PartitionOffsetResult:
        result = PartitionOffsetResult(r.int32(), r.int16(), r.int64(), r.int64())
        if version >= 4:
            r.int32()  # leader epoch
        return result

    r = Reader(body)
    if version >= 2:
        r.int32()  # throttle
    return r.topic_map(partition)
