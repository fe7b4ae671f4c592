"""DescribeConfigs (key 32), versions 0-2 (v3 adds documentation, v4+ is flexible).

Resources are topics (type 2) and brokers (type 4). v0 says per entry whether it is a default; v1+ says where
the value comes from (the config source) and may list synonyms (include_synonyms)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.wire.protocol.primitives import Reader, Writer

RESOURCE_UNKNOWN = 0
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# ConfigSource (v1+)
SOURCE_TOPIC = 1  # DYNAMIC_TOPIC_CONFIG: the topic's own setting (in the registry)
SOURCE_STATIC_BROKER = 4  # STATIC_BROKER_CONFIG: the broker's properties / flags
SOURCE_DEFAULT = 5  # DEFAULT_CONFIG: nobody set it


@dataclass(slots=True)
class ConfigResource:
    resource_type: int
    name: str
    keys: list[str] | None  # None: every entry


@dataclass(slots=True)
class DescribeConfigsRequest:
    resources: list[ConfigResource]
    include_synonyms: bool = False


def parse_request(r: Reader, version: int) -> DescribeConfigsRequest:
    resources = r.array(lambda r: ConfigResource(r.int8(), r.string(), r.nullable_array(lambda r: r.string())))
    include_synonyms = r.boolean() if version >= 1 else False
    return DescribeConfigsRequest(resources, include_synonyms)


@dataclass(slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)  # [(name, value, source)]

    @property
    def is_default(self) -> bool:
        return self.source == SOURCE_DEFAULT


@dataclass(slots=True)
class ConfigResult:
    error_code: int
    error_message: str | None
    resource_type: int
    name: str
    entries: list[ConfigEntry] = field(default_factory=list)


def encode_response(version: int, results: list[ConfigResult]) -> bytes:
    w = Writer().int32(0)  # throttle_time_ms
    w.array_len(len(results))
    for res in results:
        w.error_code(res.error_code).string(res.error_message).int8(res.resource_type).string(res.name)
        w.array_len(len(res.entries))
        for e in res.entries:
            w.string(e.name).string(e.value).boolean(e.read_only)
            if version == 0:
                w.boolean(e.is_default)
            else:
                w.int8(e.source)
            w.boolean(e.sensitive)
            if version >= 1:
                w.array_len(len(e.synonyms))
                for name, value, source in e.synonyms:
                    w.string(name).string(value).int8(source)
    return bytes(w.buf)
