"""AlterClientQuotas (key 49, KIP-546), versions 0-1 (v1 flexible): set or remove quota keys of entities (an entity:
as describe_client_quotas.py spells it), each answered with its own error; ``validate_only`` checks and stores
nothing."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.wire.protocol import flexible
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.describe_client_quotas import (
    FLEXIBLE,
    Entity,
    end_struct,
    put_array,
    put_entity,
    put_float64,
    put_string,
    read_array,
    read_entity,
    read_float64,
    read_string,
)
from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(frozen=True)
class QuotaOp:
    key: str
    value: float
    remove: bool = False


@dataclass
class AlterEntry:
    entity: Entity
    ops: list[QuotaOp] = field(default_factory=list)


def parse_request(r: Reader, version: int) -> tuple[list[AlterEntry], bool]:
    """(entries, validate_only)."""
    if version >= FLEXIBLE:
        flexible.request_body(r)

    def op(r: Reader) -> QuotaOp:
        o = QuotaOp(read_string(r, version), read_float64(r), r.boolean())
        end_struct(r, version)
        return o

    def entry(r: Reader) -> AlterEntry:
        e = AlterEntry(read_entity(r, version), read_array(r, version, op))
        end_struct(r, version)
        return e

    entries = read_array(r, version, entry)
    validate_only = r.boolean()
    end_struct(r, version)
    return entries, validate_only


def encode_response(version: int, results: list[tuple[int, str | None, Entity]]) -> bytes:
    """``results``: (error code, message, entity) per entry of the request."""
    def entry(w: Writer, e: tuple[int, str | None, Entity]) -> None:
        w.error_code(e[0])
        put_string(w, e[1], version)
        put_entity(w, e[2], version)
        end_struct(w, version)

    w = flexible.response_writer() if version >= FLEXIBLE else Writer()
    w.int32(0)  # throttle_time_ms
    put_array(w, version, results, entry)
    end_struct(w, version)
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side
CLIENT_VERSION = 0


def encode_request(entries: list[AlterEntry], validate_only: bool = False) -> tuple[int, int, list]:
    def op(w: Writer, o: QuotaOp) -> None:
        put_float64(w.string(o.key), o.value).boolean(o.remove)

    def entry(w: Writer, e: AlterEntry) -> None:
        put_entity(w, e.entity, CLIENT_VERSION)
        put_array(w, CLIENT_VERSION, e.ops, op)

    w = put_array(Writer(), CLIENT_VERSION, entries, entry).boolean(validate_only)
    return ApiKey.ALTER_CLIENT_QUOTAS, CLIENT_VERSION, [bytes(w.buf)]


def parse_response(body: memoryview | bytes) -> list[tuple[int, str | None, Entity]]:
    r = Reader(body)
    r.int32()

    def entry(r: Reader) -> tuple[int, str | None, Entity]:
        return r.int16(), r.nullable_string(), read_entity(r, 0)

    return r.array(entry)
