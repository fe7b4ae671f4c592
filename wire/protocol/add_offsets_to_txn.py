"""AddOffsetsToTxn (key 25), versions 0-2: a transactional producer is about to commit a consumer group's
offsets within its transaction (TxnOffsetCommit to the group's coordinator follows); the transaction
coordinator remembers the group, so that the offsets become visible exactly when the transaction commits."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class AddOffsetsToTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


def parse_request(r: Reader, version: int) -> AddOffsetsToTxnRequest:
    return AddOffsetsToTxnRequest(r.string(), r.int64(), r.int16(), r.string())


def encode_response(version: int, error_code: int) -> bytes:
    return bytes(Writer().int32(0).error_code(error_code).buf)


# ---------------------------------------------------------------------- client side (tests)
CLIENT_VERSION = 2


def encode_request(txn_id: str, producer_id: int, producer_epoch: int, group_id: str) -> tuple[int, int, Buffers]:
    w = Writer().string(txn_id).int64(producer_id).int16(producer_epoch).string(group_id)
    return ApiKey.ADD_OFFSETS_TO_TXN, CLIENT_VERSION, [w.buf]


def parse_response(body: memoryview | bytes) -> int:
    r = Reader(body)
    r.int32()
    return r.int16()
