"""AddPartitionsToTxn (key 24), versions 0-2 (v3+ is flexible, v4+ is broker-to-broker): a transactional
producer names the partitions it is about to write to before its first batch there, so that the coordinator
knows where to write the commit or abort markers. v1 is v0; v2 may answer PRODUCER_FENCED (older versions get
INVALID_PRODUCER_EPOCH for the same thing)."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class AddPartitionsToTxnRequest:
    """The partitions a transaction is about to write to, named before its first batch there."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    topics: list[tuple[str, list[int]]]


def parse_request(r: Reader, version: int) -> AddPartitionsToTxnRequest:
    txn_id = r.string()
    pid = r.int64()
    epoch = r.int16()
    topics = r.topic_partition_ids()
    return AddPartitionsToTxnRequest(txn_id, pid, epoch, topics)


def encode_response(version: int, results: list[tuple[str, list[tuple[int, int]]]]) -> bytes:
    """results: [(topic, [(partition, error code)])]."""
    return bytes(Writer().int32(0).partition_errors(results).buf)


# ---------------------------------------------------------------------- client side (tests)
CLIENT_VERSION = 2


def encode_request(txn_id: str, producer_id: int, producer_epoch: int,
                   topics: list[tuple[str, list[int]]]) -> tuple[int, int, Buffers]:
    w = Writer().string(txn_id).int64(producer_id).int16(producer_epoch).topic_partition_ids(topics)
    return ApiKey.ADD_PARTITIONS_TO_TXN, CLIENT_VERSION, [w.buf]


def parse_response(body: memoryview | bytes) -> dict[tuple[str, int], int]:
    r = Reader(body)
    r.int32()  # throttle_time_ms
    return r.partition_errors()
