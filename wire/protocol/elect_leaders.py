"""ElectLeaders (key 43, KIP-183/KIP-460), versions 0-1 (v2 is flexible): ask for leader elections. v0 is preferred
elections only; v1 adds the election type (0 preferred, 1 unclean) and a top-level error code. Null partitions:
every partition of the cluster."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.primitives import Reader, Writer

PREFERRED = 0
UNCLEAN = 1


@dataclass(frozen=True)
class ElectLeadersRequest:
    election_type: int
    partitions: list[tuple[str, list[int]]] | None  # None: all
    timeout_ms: int


def parse_request(r: Reader, version: int) -> ElectLeadersRequest:
    election_type = r.int8() if version >= 1 else PREFERRED
    n = r.array_len()
    partitions = None if n < 0 else [(r.string(), r.int32_array()) for _ in range(n)]
    return ElectLeadersRequest(election_type, partitions, r.int32())


# per topic: [(partition, error_code, error_message)]
PartitionResults = list[tuple[str, list[tuple[int, int, str | None]]]]


def encode_response(version: int, error_code: int, results: PartitionResults) -> bytes:
    w = Writer().int32(0)  # throttle_time_ms
    if version >= 1:
        w.error_code(error_code)
    w.array_len(len(results))
    for topic, parts in results:
        w.string(topic).array_len(len(parts))
        for p, code, message in parts:
            w.int32(p).error_code(code).string(message)
    return w.getvalue()
