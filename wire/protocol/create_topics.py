"""CreateTopics (key 19), versions 0-4 (v5+ is flexible)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class CreatableTopic:
    name: str
    num_partitions: int
    replication_factor: int
    assignments: list[tuple[int, list[int]]] = field(default_factory=list)
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass(slots=True)
class CreateTopicsRequest:
    topics: list[CreatableTopic]
    timeout_ms: int
    validate_only: bool = False


def _topic(r: Reader) -> CreatableTopic:
    name = r.string()
    num_partitions = r.int32()
    rf = r.int16()
    assignments = r.array(lambda r: (r.int32(), r.int32_array()))
    configs = dict(r.array(lambda r: (r.string(), r.nullable_string())))
    return CreatableTopic(name, num_partitions, rf, assignments, configs)


def parse_request(r: Reader, version: int) -> CreateTopicsRequest:
    topics = r.array(_topic)
    timeout = r.int32()
    validate = r.boolean() if version >= 1 else False
    return CreateTopicsRequest(topics, timeout, validate)


def encode_response(version: int, results: list[tuple[str, int, str | None]]) -> bytes:
    w = Writer()
    if version >= 2:
        w.int32(0)  # throttle_time_ms
    w.array_len(len(results))
    for name, code, message in results:
        w.string(name).error_code(code)
        if version >= 1:
            w.string(message)
    return bytes(w.buf)
