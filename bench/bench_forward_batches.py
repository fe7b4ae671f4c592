"""The mirror's rewrite of one fetch answer (batch_rewrite.forward_batches), native walk against Python walk.

One ~8 MiB answer of 200-byte random messages in sets of 50 (the pipeline bench's data), coalesced as the
mirror does (960 KiB): CPU time per message of forward_batches with the native batch walk
(mirror/_forward_scan.pyx) and with the Python walk it stands in for, alternated in one run, median of
``--repeats`` each. Both walks concatenate runs natively (wire/record/_batch_concat.pyx); the difference is
the walk over the answer's batches (headers, CRC-32C, skipping, grouping).

    .venv/bin/python bench/bench_forward_batches.py [--repeats 40] [--answer-mib 8]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import payloads  # noqa: E402

from ferry.mirror import batch_rewrite  # noqa: E402
from ferry.mirror.mirror_limits import COALESCE_BYTES  # noqa: E402
from ferry.wire.record.message_set_builder import MessageSetBuilder  # noqa: E402
from ferry.wire.record.read_committed import ReadCommitted  # noqa: E402

BATCH, SIZE = 50, 200


def answer(mib: int) -> tuple[bytearray, int]:
    """Batches of BATCH messages with consecutive base offsets, about ``mib`` MiB; (bytes, messages)."""
    builder = MessageSetBuilder(SIZE)
    values = payloads(SIZE)
    sets = [builder.build(values[i:i + BATCH]) for i in range(0, len(values) - BATCH + 1, BATCH)]
    data, offset = bytearray(), 0
    while len(data) < mib << 20:
        start = len(data)
        data += sets[(offset // BATCH) % len(sets)]
        struct.pack_into(">q", data, start, offset)
        offset += BATCH
    return data, offset


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--answer-mib", type=int, default=8)
    args = ap.parse_args()
    native = batch_rewrite._scan
    if native is None:
        print("the native walk is not built (python setup.py build_ext --inplace): nothing to compare", file=sys.stderr)
        return 1
    data, messages = answer(args.answer_mib)
    view = memoryview(data)
    walks = (("native walk", native), ("Python walk", None))
    outputs = []
    for _, scan in walks:
        batch_rewrite._scan = scan
        outputs.append(bytes(batch_rewrite.forward_batches(view, 0, 1000, 0, 0, COALESCE_BYTES).records))
    if outputs[0] != outputs[1]:
        print("the two walks wrote different bytes", file=sys.stderr)
        return 1
    del outputs
    times: dict[str, list[float]] = {name: [] for name, _ in walks}
    for _ in range(args.repeats):
        for name, scan in walks:
            batch_rewrite._scan = scan
            t = time.process_time()
            batch_rewrite.forward_batches(view, 0, 1000, 0, 0, COALESCE_BYTES, ReadCommitted(None))
            times[name].append(time.process_time() - t)
    batch_rewrite._scan = native
    print(f"{platform.node()} {platform.machine()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
          f"{messages:,} messages ({len(data) / (1 << 20):.1f} MiB) per answer, {args.repeats} repeats")
    medians = {name: statistics.median(ts) / messages * 1e6 for name, ts in times.items()}
    for name, us in medians.items():
        print(f"{name}: {us:.3f} us CPU/msg (median)")
    print(f"native / Python: {medians['native walk'] / medians['Python walk']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
