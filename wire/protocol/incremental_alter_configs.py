"""IncrementalAlterConfigs (key 44), version 0 (v1+ is flexible): per name SET, DELETE (back to the default),
APPEND or SUBTRACT (list-valued settings). The response is AlterConfigs' layout."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.alter_configs import encode_response
from ferry.wire.protocol.primitives import Reader

OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3


@dataclass(slots=True, frozen=True)
class AlterableConfig:
    name: str
    op: int
    value: str | None


@dataclass(slots=True)
class IncrementalAlterResource:
    resource_type: int
    name: str
    configs: list[AlterableConfig]


@dataclass(slots=True)
class IncrementalAlterConfigsRequest:
    resources: list[IncrementalAlterResource]
    validate_only: bool


def parse_request(r: Reader, version: int) -> IncrementalAlterConfigsRequest:
    return IncrementalAlterConfigsRequest(r.array(_resource), r.boolean())


def _resource(r: Reader) -> IncrementalAlterResource:
    return IncrementalAlterResource(r.int8(), r.string(), r.array(_config))


def _config(r: Reader) -> AlterableConfig:
    return AlterableConfig(r.string(), r.int8(), r.nullable_string())


__all__ = ["OP_APPEND", "OP_DELETE", "OP_SET", "OP_SUBTRACT", "AlterableConfig", "IncrementalAlterConfigsRequest",
           "IncrementalAlterResource", "encode_response", "parse_request"]
