"""InitProducerId (key 22), versions 0-1: hands an idempotent producer its producer id (epoch 0), and a
transactional producer (a transactional id) the id and next epoch of its transactional id, fencing older
epochs (docs/transactions.md). The client side (`encode_request`, `parse_response`) speaks v1."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer

REQUEST_VERSION = 1  # what clients send


@dataclass(slots=True)
class InitProducerIdRequest:
    transactional_id: str | None
    transaction_timeout_ms: int


def parse_request(r: Reader, version: int) -> InitProducerIdRequest:
    return InitProducerIdRequest(r.nullable_string(), r.int32())


def encode_response(version: int, error_code: int, producer_id: int, producer_epoch: int) -> bytes:
    return bytes(Writer().int32(0).error_code(error_code).int64(producer_id).int16(producer_epoch).buf)


# ---------------------------------------------------------------------- client side


def encode_request(transaction_timeout_ms: int = 60_000, transactional_id: str | None = None
                   ) -> tuple[int, int, Buffers]:
    """InitProducerId v1 for an idempotent producer, or a transactional one with ``transactional_id``."""
    return ApiKey.INIT_PRODUCER_ID, REQUEST_VERSION, [Writer().string(transactional_id)
                                                      .int32(transaction_timeout_ms).buf]


@dataclass(slots=True, frozen=True)
class InitProducerIdResponse:
    error_code: int
    producer_id: int
    producer_epoch: int


def parse_response(body: memoryview, version: int = REQUEST_VERSION) -> InitProducerIdResponse:
    """An InitProducerId answer (after the correlation id)."""
    r = Reader(body)
    r.int32()  # throttle
    return InitProducerIdResponse(r.int16(), r.int64(), r.int16())
