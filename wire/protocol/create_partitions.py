"""CreatePartitions (key 37), versions 0-1 (v2+ is flexible): grow a topic to a new total, optionally with
the new partitions' replica lists."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class PartitionsIncrease:
    name: str
    count: int  # the new total
    assignments: list[list[int]] | None  # replicas of each new partition, in order; None: the broker places


@dataclass(slots=True)
class CreatePartitionsRequest:
    topics: list[PartitionsIncrease]
    timeout_ms: int
    validate_only: bool


def parse_request(r: Reader, version: int) -> CreatePartitionsRequest:
    topics = r.array(lambda r: PartitionsIncrease(r.string(), r.int32(), r.nullable_array(lambda r: r.int32_array())))
    timeout = r.int32()
    return CreatePartitionsRequest(topics, timeout, r.boolean())


def encode_response(version: int, results: list[tuple[str, int, str | None]]) -> bytes:
    """``results``: [(topic, error_code, error_message)]."""
    w = Writer().int32(0)  # throttle_time_ms
    w.array_len(len(results))
    for name, code, message in results:
        w.string(name).error_code(code).string(message)
    return bytes(w.buf)
