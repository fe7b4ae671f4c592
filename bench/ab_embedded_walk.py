"""A/B of the embedded mirror's walk of fetched answers, in one process: forward_batches(source_positions=True)
(a Python step per batch: copy, re-stamp, CRC-32C) against copy_positions (one native pass, in place on the
answer's own writable buffer, as the copier's answers are: the copy giving each round fresh answers is not
timed). ``--baseline CHECKOUT``: a third arm, that checkout's built ``_forward_scan.stamp_positions`` called
directly (before the walk was folded: it copied each answer into a new buffer), and the standalone mirror's
``scan`` of both checkouts (the same walk, now ``_walk`` with the stamping flag off).

Answers like bench_embedded_mirror.py's backlog: 200-byte messages in batches of 50, 8 MiB per fetch.
Alternating rounds; the median per message of each.

    .venv/bin/python bench/ab_embedded_walk.py [--messages 500000] [--rounds 7] [--baseline CHECKOUT]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import statistics
import time

from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder

from ferry.mirror import _forward_scan as _scan
from ferry.mirror.batch_rewrite import COALESCE_MAX_SOURCE, copy_positions, forward_batches
from ferry.mirror.mirror_limits import COALESCE_BYTES
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


def run_b(data: list[tuple[bytearray, int]]) -> int:
    return sum(copy_positions(memoryview(records), offset, 7, ReadCommitted(None))[1] for records, offset in data)


def _scan_messages(module, data: list[tuple[bytes, int]]) -> int:
    """scan() over every answer as the standalone mirror calls it; the messages walked (50 a batch here)."""
    n = 0
    for records, offset in data:
        items, _pos, nxt, _skipped, _truncated = module.scan(memoryview(records), 0, offset, COALESCE_BYTES,
                                                             COALESCE_MAX_SOURCE, True)
        n += nxt - offset
    return n


def baseline_scan(checkout: str):
    """The ``_forward_scan`` extension built in another checkout, loaded beside this one's."""
    path = glob.glob(os.path.join(checkout, "mirror", "_forward_scan*.so"))[0]
    spec = importlib.util.spec_from_file_location("baseline._forward_scan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--baseline", metavar="CHECKOUT")
    args = ap.parse_args()
    data = answers(args.messages)
    arms = [("A forward_batches", run_a, False), ("B copy_positions", run_b, True)]
    if args.baseline:
        old = baseline_scan(args.baseline)
        arms.append(("C baseline stamp_positions", lambda d: sum(old.stamp_positions(memoryview(r), o, 7)[2]
                                                                 for r, o in d), False))
        # the standalone mirror's scan (coalescing as it does), this checkout's against the baseline's
        arms.append(("D scan", lambda d: _scan_messages(_scan, d), False))
        arms.append(("E baseline scan", lambda d: _scan_messages(old, d), False))
    times: dict[str, list[float]] = {name: [] for name, _, _ in arms}
    for _ in range(args.rounds):
        for name, fn, writable in arms:
            answers_now = [(bytearray(r), o) for r, o in data] if writable else data
            t0 = time.process_time()
            n = fn(answers_now)
            times[name].append((time.process_time() - t0) / n * 1e6)
    for name, v in times.items():
        print(f"{name}: median {statistics.median(v):.3f} µs CPU per message ({args.rounds} rounds, {n:,} messages)")
    medians = [statistics.median(v) for v in times.values()]
    print(f"B/A {medians[1] / medians[0]:.2f}" + (f", B/C {medians[1] / medians[2]:.2f}, D/E "
                                                  f"{medians[3] / medians[4]:.2f}" if args.baseline else ""))


if __name__ == "__main__":
    main()
