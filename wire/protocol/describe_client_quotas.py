"""DescribeClientQuotas (key 48, KIP-546), versions 0-1 (v1 flexible): the quotas stored for the entities a filter
matches. A filter is components (entity type ``user`` or ``client-id``, a match type, a name) and ``strict``
(entities with no other component than those named); an entity is its (type, name) pairs, a name of None being
the default entity. Values are float64, as Kafka's."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ferry.wire.protocol import flexible
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.primitives import Reader, Writer

FLEXIBLE = 1
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2  # name given (None: the default) / the default / any named
_F64 = struct.Struct(">d")

Entity = list[tuple[str, str | None]]  # [(entity type, name or None for the default)]


@dataclass(frozen=True)
class Component:
    entity_type: str
    match_type: int
    match: str | None = None


@dataclass
class DescribeClientQuotasRequest:
    components: list[Component] = field(default_factory=list)
    strict: bool = False


# ---------------------------------------------------------------------- shared by AlterClientQuotas
def read_float64(r: Reader) -> float:
    return _F64.unpack(struct.pack(">q", r.int64()))[0]


def put_float64(w: Writer, v: float) -> Writer:
    return w.raw(_F64.pack(v))


def read_string(r: Reader, version: int) -> str:
    return flexible.compact_string(r) if version >= FLEXIBLE else r.string()


def read_nullable_string(r: Reader, version: int) -> str | None:
    return flexible.compact_nullable_string(r) if version >= FLEXIBLE else r.nullable_string()


def put_string(w: Writer, s: str | None, version: int) -> Writer:
    return flexible.put_compact_string(w, s) if version >= FLEXIBLE else w.string(s)


def read_array(r: Reader, version: int, item) -> list:
    items = flexible.compact_array(r, item) if version >= FLEXIBLE else r.nullable_array(item)
    return items or []


def put_array(w: Writer, version: int, items: list | None, item) -> Writer:
    if version >= FLEXIBLE:
        return flexible.put_compact_array(w, items, item)
    if items is None:
        return w.array_len(-1)
    w.array_len(len(items))
    for x in items:
        item(w, x)
    return w


def end_struct(r_or_w: Reader | Writer, version: int) -> None:
    """A struct's tagged fields (flexible versions only)."""
    if version >= FLEXIBLE:
        if isinstance(r_or_w, Reader):
            flexible.skip_tagged_fields(r_or_w)
        else:
            flexible.put_tagged_fields(r_or_w)


def read_entity(r: Reader, version: int) -> Entity:
    def part(r: Reader) -> tuple[str, str | None]:
        out = (read_string(r, version), read_nullable_string(r, version))
        end_struct(r, version)
        return out

    return read_array(r, version, part)


def put_entity(w: Writer, entity: Entity, version: int) -> None:
    def part(w: Writer, p: tuple[str, str | None]) -> None:
        put_string(w, p[0], version)
        put_string(w, p[1], version)
        end_struct(w, version)

    put_array(w, version, entity, part)


# ---------------------------------------------------------------------- server side
def parse_request(r: Reader, version: int) -> DescribeClientQuotasRequest:
    if version >= FLEXIBLE:
        flexible.request_body(r)

    def component(r: Reader) -> Component:
        c = Component(read_string(r, version), r.int8(), read_nullable_string(r, version))
        end_struct(r, version)
        return c

    components = read_array(r, version, component)
    strict = r.boolean()
    end_struct(r, version)
    return DescribeClientQuotasRequest(components, strict)


def encode_response(version: int, error_code: int, error_message: str | None,
                    entries: list[tuple[Entity, dict[str, float]]] | None) -> bytes:
    def entry(w: Writer, e: tuple[Entity, dict[str, float]]) -> None:
        put_entity(w, e[0], version)

        def value(w: Writer, kv: tuple[str, float]) -> None:
            put_string(w, kv[0], version)
            put_float64(w, kv[1])
            end_struct(w, version)

        put_array(w, version, sorted(e[1].items()), value)
        end_struct(w, version)

    w = flexible.response_writer() if version >= FLEXIBLE else Writer()
    w.int32(0).error_code(error_code)  # throttle_time_ms, error_code
    put_string(w, error_message, version)
    put_array(w, version, entries, entry)
    end_struct(w, version)
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side
CLIENT_VERSION = 0


def encode_request(components: list[Component], strict: bool = False) -> tuple[int, int, list]:
    def component(w: Writer, c: Component) -> None:
        w.string(c.entity_type).int8(c.match_type).string(c.match)

    w = put_array(Writer(), CLIENT_VERSION, components, component).boolean(strict)
    return ApiKey.DESCRIBE_CLIENT_QUOTAS, CLIENT_VERSION, [bytes(w.buf)]


def parse_response(body: memoryview | bytes) -> tuple[int, str | None, list[tuple[Entity, dict[str, float]]]]:
    """(error code, message, [(entity, {key: value})]) of a v0 answer."""
    r = Reader(body)
    r.int32()
    code, message = r.int16(), r.nullable_string()

    def entry(r: Reader) -> tuple[Entity, dict[str, float]]:
        entity = read_entity(r, 0)
        values = dict(r.array(lambda r: (r.string(), read_float64(r))))
        return entity, values

    return code, message, r.nullable_array(entry) or []
