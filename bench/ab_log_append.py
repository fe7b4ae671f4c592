"""A/B of Log.append alone: the storage layer at a git revision against the working tree, in one process.

Both versions of ``broker/log`` are loaded side by side (the old one exported from git into a temporary
package) and their appends interleaved round by round, so both see the same CPU, page cache and load:
on a shared machine that is the only comparison whose difference means anything. CPU time per append
(``time.process_time``) is reported, best and median of the rounds.

    python bench/ab_log_append.py --old fc8e742~1 --dir /dev/shm/ab --appends 100000 --rounds 10 --messages 10
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def export_old(rev: str, into: Path) -> str:
    """``broker/log`` at ``rev`` as the package ``old_log`` under ``into``; returns the package name."""
    pkg = into / "old_log"
    pkg.mkdir(parents=True)
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:broker/log"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in names:
        if not name.endswith(".py"):
            continue
        text = subprocess.run(["git", "show", f"{rev}:broker/log/{name}"], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout
        (pkg / name).write_text(re.sub(r"\bferry\.broker\.log\.", "old_log.", text))
    sys.path.insert(0, str(into))
    return "old_log"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="git revision of the A side (B is the working tree)")
    ap.add_argument("--dir", default=None, help="where the logs are written (a tmpfs isolates CPU cost)")
    ap.add_argument("--appends", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--messages", type=int, default=10, help="100-byte messages per batch")
    args = ap.parse_args()

    from ferry.broker.log.log import Log as NewLog
    from ferry.wire.log_config import LogConfig
    from ferry.wire.record.message_set_builder import MessageSetBuilder

    tmp = Path(tempfile.mkdtemp(prefix="ab-log-"))
    root = Path(args.dir) if args.dir else tmp / "logs"
    root.mkdir(parents=True, exist_ok=True)
    try:
        old_log = importlib.import_module(export_old(args.old, tmp / "pkg") + ".log").Log
        batch = MessageSetBuilder().build([b"x" * 100] * args.messages)
        cfg = LogConfig(segment_bytes=8 << 20, flush_interval_messages=1 << 60, flush_interval_ms=1 << 60)
        sides = {"old": old_log, "new": NewLog}
        cpu: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(args.rounds):
            for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
                d = root / f"{name}-{r}"
                lg = sides[name](d, cfg)
                start = time.process_time()
                for _ in range(args.appends):
                    lg.append(batch)
                cpu[name].append((time.process_time() - start) / args.appends * 1e6)
                lg.close()
                shutil.rmtree(d)
        for name, values in cpu.items():
            values.sort()
            print(f"{name} ({args.old if name == 'old' else 'working tree'}): {len(batch)} B batches, "
                  f"CPU us/append best {values[0]:.2f} median {values[len(values) // 2]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
