"""EndTxn (key 26), versions 0-2: commit or abort the producer's ongoing transaction. The coordinator
records the decision (PrepareCommit/PrepareAbort) durably, writes a marker to every partition of the
transaction and, on commit, makes the transaction's group offsets visible. The response is AddOffsetsToTxn's
layout (throttle time, error code)."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.add_offsets_to_txn import encode_response, parse_response
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class EndTxnRequest:
    """The producer's decision on its ongoing transaction (committed False: abort)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


def parse_request(r: Reader, version: int) -> EndTxnRequest:
    return EndTxnRequest(r.string(), r.int64(), r.int16(), r.boolean())


# ---------------------------------------------------------------------- client side (tests)
CLIENT_VERSION = 2


def encode_request(txn_id: str, producer_id: int, producer_epoch: int, committed: bool) -> tuple[int, int, Buffers]:
    w = Writer().string(txn_id).int64(producer_id).int16(producer_epoch).boolean(committed)
    return ApiKey.END_TXN, CLIENT_VERSION, [w.buf]


__all__ = ["CLIENT_VERSION", "EndTxnRequest", "encode_request", "encode_response", "parse_request", "parse_response"]
