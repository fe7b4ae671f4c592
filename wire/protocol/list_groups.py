"""ListGroups (key 16), versions 0-5: v3 is flexible, v4 (KIP-518) filters by state and lists each group's state
(Stable, PreparingRebalance, CompletingRebalance, Empty), which admin clients show; v5 (KIP-848) filters by
and lists each group's type ("classic" or "consumer").

Each broker lists the groups it coordinates; admin clients ask every broker and merge the answers."""

from __future__ import annotations

from ferry.wire.protocol import flexible
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.primitives import Reader, Writer

FLEXIBLE = 3


def parse_request(r: Reader, version: int) -> frozenset[str] | None:
    """The states asked for (v4; None or empty: every group)."""
    return parse_filters(r, version)[0]


def parse_filters(r: Reader, version: int) -> tuple[frozenset[str] | None, frozenset[str] | None]:
    """(states, types) asked for (v4, v5; None: every group)."""
    if version < FLEXIBLE:
        return None, None
    flexible.request_body(r)
    states = flexible.compact_array(r, flexible.compact_string) if version >= 4 else None
    types = flexible.compact_array(r, flexible.compact_string) if version >= 5 else None
    flexible.skip_tagged_fields(r)
    return (frozenset(states) if states else None), (frozenset(t.lower() for t in types) if types else None)


def encode_response(version: int, error_code: int, groups: list[tuple[str, str, str]],
                    states: frozenset[str] | None = None, types: frozenset[str] | None = None,
                    consumer_groups: frozenset[str] = frozenset()) -> bytes:
    """``groups``: [(group_id, protocol_type, state)]; ``states``: v4's filter (case-insensitive, as Kafka);
    ``types``: v5's filter; ``consumer_groups``: the KIP-848 ones (type "consumer"; the others are "classic")."""
    if states:
        wanted = {s.lower() for s in states}
        groups = [g for g in groups if g[2].lower() in wanted]
    if types:
        groups = [g for g in groups if ("consumer" if g[0] in consumer_groups else "classic") in types]
    if version < FLEXIBLE:
        w = Writer()
        if version >= 1:
            w.int32(0)  # throttle_time_ms
        w.error_code(error_code).array_len(len(groups))
        for group_id, protocol_type, _state in groups:
            w.string(group_id).string(protocol_type)
        return bytes(w.buf)

    def group(w: Writer, g: tuple[str, str, str]) -> None:
        flexible.put_compact_string(w, g[0])
        flexible.put_compact_string(w, g[1])
        if version >= 4:
            flexible.put_compact_string(w, g[2])
        if version >= 5:
            flexible.put_compact_string(w, "consumer" if g[0] in consumer_groups else "classic")
        flexible.put_tagged_fields(w)

    w = flexible.response_writer().int32(0).error_code(error_code)
    flexible.put_compact_array(w, groups, group)
    return bytes(flexible.put_tagged_fields(w).buf)


# ---------------------------------------------------------------------- client side
CLIENT_VERSION = 1


def encode_request() -> tuple[int, int, list]:
    return ApiKey.LIST_GROUPS, CLIENT_VERSION, [b""]


def parse_response(body: memoryview | bytes) -> tuple[int, list[tuple[str, str]]]:
    """(error_code, [(group_id, protocol_type)]) of a v1 answer."""
    r = Reader(body)
    r.int32()  # throttle_time_ms
    code = r.int16()
    return code, r.array(lambda r: (r.string(), r.string()))
