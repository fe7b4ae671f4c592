"""InitProducerId (key 22), versions 0-1: hands an idempotent producer its producer id (epoch 0)."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class InitProducerIdRequest:
    transactional_id: str | None
    transaction_timeout_ms: int


def parse_request(r: Reader, version: int) -> InitProducerIdRequest:
    return InitProducerIdRequest(r.nullable_string(), r.int32())


def encode_response(version: int, error_code: int, producer_id: int, producer_epoch: int) -> bytes:
    return bytes(Writer().int32(0).int16(error_code).int64(producer_id).int16(producer_epoch).buf)
