"""ListTransactions (key 66, KIP-664), version 0 (flexible): the transactional ids a coordinator owns, with their
producer id and state, optionally filtered by state and producer id (a state this broker does not know is
listed back in ``unknown_state_filters``, as Kafka does)."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol import flexible
from ferry.wire.protocol.primitives import Reader, Writer


@dataclass(frozen=True)
class ListTransactionsRequest:
    state_filters: list[str]
    producer_id_filters: list[int]


def parse_request(r: Reader, version: int) -> ListTransactionsRequest:
    flexible.request_body(r)
    states = flexible.compact_array(r, flexible.compact_string) or []
    pids = flexible.compact_array(r, lambda r: r.int64()) or []
    flexible.skip_tagged_fields(r)
    return ListTransactionsRequest(states, pids)


def encode_response(error_code: int, unknown_states: list[str], txns: list[tuple[str, int, str]]) -> bytes:
    """``txns``: [(transactional id, producer id, state)]."""
    def txn(w: Writer, t: tuple[str, int, str]) -> None:
        flexible.put_compact_string(w, t[0])
        w.int64(t[1])
        flexible.put_compact_string(w, t[2])
        flexible.put_tagged_fields(w)

    w = flexible.response_writer().int32(0).error_code(error_code)
    flexible.put_compact_array(w, unknown_states, flexible.put_compact_string)
    flexible.put_compact_array(w, txns, txn)
    return bytes(flexible.put_tagged_fields(w).buf)
