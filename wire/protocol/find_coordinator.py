"""FindCoordinator (key 10), version 0. There is no group coordinator (groups live in ZooKeeper, the paper's
way), so the answer is always COORDINATOR_NOT_AVAILABLE. It is advertised only because librdkafka sends
LZ4-compressed batches only to brokers that advertise it."""

from __future__ import annotations

from ferry.wire.protocol.primitives import Reader, Writer


def parse_request(r: Reader, version: int) -> str:
    return r.string()  # the group id


def encode_response(version: int, error_code: int, node_id: int = -1, host: str = "", port: int = -1) -> bytes:
    return bytes(Writer().int16(error_code).int32(node_id).string(host).int32(port).buf)
