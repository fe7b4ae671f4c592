"""A/B of the leader append of the embedded mirror's copied answers (Log.append with the link's producer, a
leader epoch, sequences unchecked, CRCs fresh), each arm in a process of its own: ``--baseline CHECKOUT`` first
on the A process's PYTHONPATH (a checkout's ``ferry/`` needs links to its package folders and its native parts
built, as bench/ab_mirror.py explains), this checkout in B. Without ``--baseline`` both arms run this checkout
(the noise floor).

Answers like bench_embedded_mirror.py's backlog: 200-byte messages in batches of 50, 8 MiB per answer, stamped
by the copier's walk (copy_positions). The figure is the appending process's CPU (user+sys) per message over
the appends, so the page-cache copy of ``pwritev`` is in it, and its user part alone (on a shared machine the
system part now and then triples, in either arm); alternating rounds, the median of each arm.

    .venv/bin/python bench/ab_leader_append.py [--messages 400000] [--rounds 9] [--baseline CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def arm(messages: int) -> dict:
    """One arm's run, in this process: (CPU µs, wall µs) per message of the appends."""
    sys.path.insert(0, str(HERE))
    from ab_embedded_walk import answers

    from ferry.broker.log.log import Log
    from ferry.mirror.batch_rewrite import copy_positions
    from ferry.wire.log_config import LogConfig
    from ferry.wire.record.read_committed import ReadCommitted

    stamped = []
    for records, offset in answers(messages):
        out, n, _next = copy_positions(memoryview(bytearray(records)), offset, 7, ReadCommitted(None))
        stamped.append((bytes(out), n))
    tmp = Path(tempfile.mkdtemp(prefix="ferry-ab-append-"))
    try:
        lg = Log(tmp / "t-0", LogConfig())
        t0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for out, _n in stamped:
            lg.append(out, leader_epoch=0, check_sequences=False, crcs_fresh=True)
        t1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - w0
        user, system = t1.ru_utime - t0.ru_utime, t1.ru_stime - t0.ru_stime
        cpu = user + system
        lg.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    total = sum(n for _o, n in stamped)
    return {"cpu_us": cpu / total * 1e6, "user_us": user / total * 1e6, "sys_us": system / total * 1e6,
            "wall_us": wall / total * 1e6, "messages": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--baseline", metavar="CHECKOUT")
    ap.add_argument("--arm", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(arm(args.messages)))
        return
    results: dict[str, list[dict]] = {"A": [], "B": []}
    for rnd in range(args.rounds):
        for name in ("A", "B") if rnd % 2 == 0 else ("B", "A"):  # either arm first: the page cache's state
            env = dict(os.environ)
            if name == "A" and args.baseline:
                env["PYTHONPATH"] = os.pathsep.join(p for p in (args.baseline, env.get("PYTHONPATH")) if p)
            out = subprocess.run([sys.executable, __file__, "--arm", "--messages", str(args.messages)], env=env,
                                 cwd=tempfile.gettempdir(), check=True, capture_output=True, text=True, timeout=600)
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
        a, b = results["A"][-1], results["B"][-1]
        print(f"round {rnd}: A {a['cpu_us']:.3f} us CPU/msg (user {a['user_us']:.3f}, sys {a['sys_us']:.3f}; "
              f"{a['wall_us']:.3f} wall), B {b['cpu_us']:.3f} (user {b['user_us']:.3f}, sys {b['sys_us']:.3f}; "
              f"{b['wall_us']:.3f} wall); B/A CPU {b['cpu_us'] / a['cpu_us']:.2f}x; load {os.getloadavg()[0]:.1f}",
              flush=True)
    for key in ("cpu_us", "user_us"):  # user: the Python and native work; sys: mostly the page-cache copy
        med = {k: statistics.median(r[key] for r in v) for k, v in results.items()}
        ratio = statistics.median(b[key] / max(a[key], 1e-9)
                                  for a, b in zip(results["A"], results["B"], strict=True))
        print(f"medians of {key}: A {med['A']:.3f} us/msg, B {med['B']:.3f}; B/A per round, median {ratio:.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
