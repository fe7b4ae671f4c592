"""The log cleaner's throughput: one clean of a key-heavy log (MB/s read, records/s), as bench/RESULTS.md reports.

A log of ``--records`` records over ``--keys`` keys (batches of ``--batch`` records, ``--value-bytes`` values,
optionally compressed) is written, rolled, and cleaned once by LogCleaner.clean_once on this thread; the
clean's own stats (bytes read and written, records kept, seconds) are printed.

    python bench/bench_cleaner.py --dir /dev/shm/cleaner --records 1000000 --keys 10000 --codec lz4
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from ferry.broker.log.log import Log
from ferry.broker.log.log_cleaner import CleanerConfig, LogCleaner
from ferry.wire.log_config import LogConfig

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def build(records: int, keys: int, batch: int, value_bytes: int, codec: int) -> list[bytes]:
    out = []
    pad = b"x" * max(0, value_bytes - 12)
    ts = int(time.time() * 1000)
    for b in range(0, records, batch):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
        for i in range(b, min(b + batch, records)):
            builder.append(i - b, timestamp=ts, key=f"key-{i % keys}".encode(), value=b"%010d" % i + pad, headers=[])
        out.append(bytes(builder.build()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/dev/shm/ferry-bench-cleaner")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--codec", choices=sorted(CODECS), default="none")
    args = ap.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    config = LogConfig(cleanup_policy="compact", consumers_see_unflushed=True, min_cleanable_dirty_ratio=0.0,
                       segment_bytes=64 << 20, file_delete_delay_ms=0)
    log = Log(root / "bench-0", config)
    for payload in build(args.records, args.keys, args.batch, args.value_bytes, CODECS[args.codec]):
        log.append(payload)
    log.flush()
    log.local.roll(log.log_end_offset, int(time.time() * 1000))
    size = log.size_in_bytes
    cleaner = LogCleaner(CleanerConfig(), root, lambda: {("bench", 0): log})
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    assert cleaner.clean_once()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    s = cleaner.last_stats
    assert s is not None
    print(f"log {size / 1e6:.1f} MB, {args.records:,} records over {args.keys:,} keys, codec {args.codec}, "
          f"batches of {args.batch}")
    print(f"clean: {wall:.2f} s wall, {cpu:.2f} s CPU; read {s.bytes_read / 1e6:.1f} MB "
          f"({s.bytes_read / 1e6 / wall:.1f} MB/s), wrote {s.bytes_written / 1e6:.2f} MB; "
          f"{s.records_read / wall:,.0f} records/s; kept {s.records_kept:,} of {s.records_read:,}")
    log.close()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
