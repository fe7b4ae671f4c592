"""A/B of the embedded mirror's walk of fetched answers, in one process: forward_batches(source_positions=True)
(a Python step per batch: copy, re-stamp, CRC-32C) against copy_positions (one native pass).

Answers like bench_embedded_mirror.py's backlog: 200-byte messages in batches of 50, 8 MiB per fetch.
Alternating A and B rounds; the median per message of each.

    .venv/bin/python bench/ab_embedded_walk.py [--messages 500000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder

from ferry.mirror.batch_rewrite import copy_positions, forward_batches
from ferry.wire.record.read_committed import ReadCommitted

FETCH_BYTES = 8 << 20


def answers(messages: int) -> list[tuple[bytes, int]]:
    """(records, fetch offset) of each 8 MiB answer covering ``messages`` messages in batches of 50."""
    value = os.urandom(200)
    out, chunk, start, offset = [], [], 0, 0
    size = 0
    while offset < messages:
        b = DefaultRecordBatchBuilder(2, 0, 0, 1, 0, 0, 1 << 30)
        for i in range(50):
            b.append(i, 1_700_000_000_000 + offset + i, None, value, [])
        raw = bytearray(b.build())
        raw[0:8] = offset.to_bytes(8, "big")
        chunk.append(bytes(raw))
        size += len(raw)
        offset += 50
        if size >= FETCH_BYTES:
            out.append((b"".join(chunk), start))
            chunk, start, size = [], offset, 0
    if chunk:
        out.append((b"".join(chunk), start))
    return out


def run_a(data: list[tuple[bytes, int]]) -> int:
    n = 0
    for records, offset in data:
        n += forward_batches(memoryview(records), offset, 7, 0, 0, committed=ReadCommitted(None),
                             source_positions=True).messages
    return n


def run_b(data: list[tuple[bytes, int]]) -> int:
    return sum(copy_positions(memoryview(records), offset, 7, ReadCommitted(None))[1] for records, offset in data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    data = answers(args.messages)
    times: dict[str, list[float]] = {"A forward_batches": [], "B copy_positions": []}
    for _ in range(args.rounds):
        for name, fn in (("A forward_batches", run_a), ("B copy_positions", run_b)):
            t0 = time.process_time()
            n = fn(data)
            times[name].append((time.process_time() - t0) / n * 1e6)
    for name, v in times.items():
        print(f"{name}: median {statistics.median(v):.3f} µs CPU per message ({args.rounds} rounds, {n:,} messages)")
    a, b = (statistics.median(v) for v in times.values())
    print(f"B/A {b / a:.2f}")


if __name__ == "__main__":
    main()
