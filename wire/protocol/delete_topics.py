"""DeleteTopics (key 20), versions 0-3 (v4+ is flexible). v1 adds the response's throttle time; v2-3 change
nothing on the wire."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class DeleteTopicsRequest:
    topics: list[str]
    timeout_ms: int


def parse_request(r: Reader, version: int) -> DeleteTopicsRequest:
    topics = r.array(lambda r: r.string())
    return DeleteTopicsRequest(topics, r.int32())


def encode_response(version: int, results: list[tuple[str, int]]) -> bytes:
    """``results``: [(topic, error_code)]."""
    w = Writer()
    if version >= 1:
        w.int32(0)  # throttle_time_ms
    w.array_len(len(results))
    for name, code in results:
        w.string(name).error_code(code)
    return bytes(w.buf)
