"""DescribeTransactions (key 65, KIP-664), version 0 (flexible): a transactional id's state at its coordinator:
state, timeout, start time, producer id and epoch, and the partitions of the ongoing transaction."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.wire.protocol import flexible
from ferry.wire.protocol.primitives import Reader, Writer


def parse_request(r: Reader, version: int) -> list[str]:
    flexible.request_body(r)
    ids = flexible.compact_array(r, flexible.compact_string) or []
    flexible.skip_tagged_fields(r)
    return ids


@dataclass
class TransactionState:
    error_code: int
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    topics: list[tuple[str, list[int]]] = field(default_factory=list)


def encode_response(states: list[TransactionState]) -> bytes:
    def topic(w: Writer, t: tuple[str, list[int]]) -> None:
        flexible.put_compact_string(w, t[0])
        flexible.put_compact_array(w, t[1], lambda w, p: w.int32(p))
        flexible.put_tagged_fields(w)

    def state(w: Writer, s: TransactionState) -> None:
        w.error_code(s.error_code)
        flexible.put_compact_string(w, s.transactional_id)
        flexible.put_compact_string(w, s.state)
        w.int32(s.timeout_ms).int64(s.start_time_ms).int64(s.producer_id).int16(s.producer_epoch)
        flexible.put_compact_array(w, s.topics, topic)
        flexible.put_tagged_fields(w)

    w = flexible.response_writer().int32(0)
    flexible.put_compact_array(w, states, state)
    return bytes(flexible.put_tagged_fields(w).buf)
