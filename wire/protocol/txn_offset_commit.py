"""TxnOffsetCommit (key 28), versions 0-2 (v3+ is flexible): a transactional producer commits a consumer
group's offsets as part of its transaction, to the group's coordinator. v2 adds each partition's committed
leader epoch. The offsets stay pending until the transaction commits (aborted: dropped)."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class TxnOffset:
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(slots=True)
class TxnOffsetCommitRequest:
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: list[tuple[str, list[TxnOffset]]]


def parse_request(r: Reader, version: int) -> TxnOffsetCommitRequest:
    txn_id, group = r.string(), r.string()
    pid, epoch = r.int64(), r.int16()

    def partition(r: Reader) -> TxnOffset:
        p, offset = r.int32(), r.int64()
        leader_epoch = r.int32() if version >= 2 else -1
        return TxnOffset(p, offset, leader_epoch, r.nullable_string())

    topics = r.topic_array(partition)
    return TxnOffsetCommitRequest(txn_id, group, pid, epoch, topics)


def encode_response(version: int, results: list[tuple[str, list[tuple[int, int]]]]) -> bytes:
    """results: [(topic, [(partition, error code)])]."""
    return bytes(Writer().int32(0).partition_errors(results).buf)


# ---------------------------------------------------------------------- client side (tests)
CLIENT_VERSION = 2


def encode_request(txn_id: str, group: str, producer_id: int, producer_epoch: int,
                   topics: list[tuple[str, list[tuple[int, int]]]]) -> tuple[int, int, Buffers]:
    """topics: [(topic, [(partition, offset)])]."""
    w = Writer().string(txn_id).string(group).int64(producer_id).int16(producer_epoch)
    return ApiKey.TXN_OFFSET_COMMIT, CLIENT_VERSION, [w.topic_array(topics, _txn_offset).buf]


def _txn_offset(w: Writer, partition_offset: tuple[int, int]) -> None:
    partition, offset = partition_offset
    w.int32(partition).int64(offset).int32(-1).string(None)  # leader epoch unknown, no metadata


def parse_response(body: memoryview | bytes) -> dict[tuple[str, int], int]:
    r = Reader(body)
    r.int32()  # throttle_time_ms
    return r.partition_errors()
