"""AlterConfigs (key 33), versions 0-1 (v2+ is flexible): replaces a resource's whole set of overrides.

Deprecated by IncrementalAlterConfigs (which changes only the names it lists) but still what older tools
send. The response layout is IncrementalAlterConfigs' too."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(slots=True)
class AlterConfigsResource:
    resource_type: int
    name: str
    configs: list[tuple[str, str | None]]


@dataclass(slots=True)
class AlterConfigsRequest:
    resources: list[AlterConfigsResource]
    validate_only: bool


def parse_request(r: Reader, version: int) -> AlterConfigsRequest:
    resources = r.array(lambda r: AlterConfigsResource(
        r.int8(), r.string(), r.array(lambda r: (r.string(), r.nullable_string()))))
    return AlterConfigsRequest(resources, r.boolean())


def encode_response(version: int, results: list[tuple[int, str | None, int, str]]) -> bytes:
    """``results``: [(error_code, error_message, resource_type, resource_name)]."""
    w = Writer().int32(0)  # throttle_time_ms
    w.array_len(len(results))
    for code, message, rtype, name in results:
        w.error_code(code).string(message).int8(rtype).string(name)
    return bytes(w.buf)
