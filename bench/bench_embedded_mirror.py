"""The embedded mirror's backlog copy against a bare MessageSetConsumer and the standalone mirror, in one run
(issue 39's first bar).

ZooKeeper and one live `ferry broker`. Backlog: ``--messages`` 200-byte messages in sets of 50 over
``--partitions`` partitions (bench_mirror_pipeline.py's fill). Each round: the MessageSetConsumer reads the whole
live topic in a process of its own (lean, then checking CRCs); a fresh one-broker offline cluster is started; a
new mirror link copies the whole topic into it (clock from the first copied message visible offline to the last:
the offline high watermark); then the standalone `ferry mirror` (MirrorMaker, in this process) copies it once
more into the same cluster, behind the link's copy; the offline cluster is stopped and its data removed (a link
made again from the same live cluster takes back the deleted link's producer id and finds its copy complete).
Machine CPU per message covers every process (both brokers, the mirror, the kernel); the CPU per copied message
of the processes that copy (the link: the live and the offline broker; the standalone: the mirror and both
brokers, /proc and getrusage) is the figure a shared machine leaves comparable.

A/B in one run (``--baseline CHECKOUT``): in each round, before this checkout's copy, a cluster whose broker runs
that checkout (first on its PYTHONPATH; a checkout's ``ferry/`` folder needs links to its package folders and its
native parts built, as bench/ab_mirror.py explains) copies the topic by a link of its own (A).
``--until HH:MM`` starts no round after that time (UTC) and prints the medians of the rounds run.

    .venv/bin/python bench/bench_embedded_mirror.py [--messages 2000000] [--rounds 3] [--baseline CHECKOUT]
        [--until HH:MM] [--offline-override KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mirror_pipeline import (  # noqa: E402
    end_offsets,
    fill,
    live_end,
    machine_cpu,
    machine_line,
    mirror_copy,
    proc_cpu,
    read_phase,
    settle,
)
from servers import drop_scratch, scratch_zookeeper  # noqa: E402

from ferry.client.wire_client import WireClient  # noqa: E402
from ferry.embedded import BrokerProcess, ZooKeeperServer  # noqa: E402
from ferry.zk.cluster_registry import ClusterRegistry  # noqa: E402


def link(offline_zk: str, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "link", *args, "--zookeeper", offline_zk],
                   check=True, capture_output=True, timeout=60)


def embedded_copy(live: BrokerProcess, offline: BrokerProcess, live_zk: str, offline_zk: str, topic: str,
                  partitions: int) -> tuple[int, float, float, float]:
    """(messages timed, seconds, machine CPU seconds, the two brokers' CPU seconds) of one link copying the whole
    live topic. The brokers' own CPU per message is the figure a loaded machine leaves comparable."""
    total = live_end(live, topic, partitions)
    watch = WireClient(offline.bootstrap, client_id="bench-watch")
    name = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        base = end_offsets(watch, topic, partitions) if _has_topic(offline_zk, topic) else 0
        link(offline_zk, "create", name, "--source-zookeeper", live_zk, "--include", topic)
        t0 = m0 = None
        first = base
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            got = end_offsets(watch, topic, partitions) if t0 is not None or _has_topic(offline_zk, topic) else 0
            if t0 is None and got > base:
                t0, m0, first = time.perf_counter(), machine_cpu(), got
                b0 = proc_cpu(live) + proc_cpu(offline)
            if got >= base + total:
                return (base + total - first, time.perf_counter() - t0, machine_cpu() - m0,
                        proc_cpu(live) + proc_cpu(offline) - b0)
            time.sleep(0.02)
        raise RuntimeError("the link did not finish in 600 s")
    finally:
        link(offline_zk, "delete", name)
        watch.close()


def _has_topic(zk: str, topic: str) -> bool:
    with ClusterRegistry(zk) as reg:
        return reg.topic(topic) is not None


def start_offline(zk: ZooKeeperServer, tmp: Path, name: str, checkout: str | None,
                  overrides: list[str]) -> BrokerProcess:
    """A fresh one-broker offline cluster (chroot /b/NAME); ``checkout`` first on its PYTHONPATH (the A arm).

    Fresh each round: a link created again from the same live cluster takes back the deleted link's producer id
    and so finds the earlier round's copy complete (docs/mirror.md); a new cluster also frees the disk."""
    saved = os.environ.get("PYTHONPATH")
    if checkout:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (checkout, saved) if p)
    try:
        return _own_log(BrokerProcess(1, tmp / name, f"{zk.connect}/b/{name}", "offline",
                                      extra_args=overrides)).start()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _own_log(broker: BrokerProcess) -> BrokerProcess:
    """The brokers all have id 1: each writes its own log file (``<data dir>.out``), not one shared."""
    broker.log_file = broker.data_dir.with_name(broker.data_dir.name + ".out")
    return broker


def drop(broker: BrokerProcess) -> None:
    broker.stop()
    shutil.rmtree(broker.data_dir, ignore_errors=True)


def past(until: str | None) -> bool:
    return until is not None and time.strftime("%H:%M", time.gmtime()) >= until


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", metavar="CHECKOUT", help="run an A arm: the link of this checkout's broker")
    ap.add_argument("--until", metavar="HH:MM", help="start no round after this time (UTC); at least one runs")
    ap.add_argument("--offline-override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting of the offline brokers (their --override), e.g. "
                         "log.consumers.see.unflushed=true: the copy's clock then stops at the appended end, not the "
                         "flushed one (with the default log.flush.interval.messages, an fsync per answer)")
    args = ap.parse_args()
    if not 50 <= args.messages <= 50_000_000 or not 1 <= args.rounds <= 100 or not 1 <= args.partitions <= 64:
        ap.error("--messages 50-50000000, --rounds 1-100, --partitions 1-64")
    if args.until and not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", args.until):
        ap.error(f"--until {args.until!r}: expected HH:MM (UTC)")
    tmp, zk = scratch_zookeeper("ferry-bench-embedded-")
    brokers: list[BrokerProcess] = []
    ratios: dict[str, list[float]] = {"embedded/lean": [], "embedded/checking": [], "standalone/lean": [],
                                      "embedded/standalone": []}
    if args.baseline:
        ratios |= {"baseline/lean": [], "embedded/baseline": []}
    cpu_ratio: list[float] = []
    proc_ratio: list[float] = []
    us: dict[str, list[float]] = {"A brokers": [], "B brokers": [], "standalone mirror+brokers": []}
    try:
        live_zk = f"{zk.connect}/b/live"
        live = _own_log(BrokerProcess(1, tmp / "live", live_zk, "live")).start()
        overrides = [a for kv in args.offline_override for a in ("--override", kv)]
        brokers.append(live)
        with ClusterRegistry(live_zk) as reg:
            reg.create_topic("backlog", args.partitions)
        time.sleep(1.0)
        fill(live.bootstrap, "backlog", args.messages, args.partitions)
        time.sleep(1.0)
        for rnd in range(args.rounds):
            if rnd and past(args.until):
                print(f"--until {args.until} UTC passed: {rnd} rounds run", flush=True)
                break
            print(f"round {rnd} at {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            rates = {check: read_phase(live.bootstrap, "backlog", args.partitions, check, f"round {rnd}")
                     for check in (False, True)}
            if args.baseline:
                baseline = start_offline(zk, tmp, f"offline-a-{rnd}", args.baseline, overrides)
                brokers.append(baseline)
                settle()
                an, asecs, abusy, acpu = embedded_copy(live, baseline, live_zk, baseline.zk_connect, "backlog",
                                                       args.partitions)
                drop(brokers.pop())
                base_rate = an / asecs
                us["A brokers"].append(acpu / an * 1e6)
                print(f"round {rnd}: A link {an:,} msgs {base_rate:,.0f} msg/s -> {base_rate / rates[False]:.2f}x "
                      f"of the lean reader; brokers {acpu / an * 1e6:.2f} us CPU/msg; "
                      f"{machine_line(abusy, asecs, an)}", flush=True)
            offline = start_offline(zk, tmp, f"offline-{rnd}", None, overrides)
            brokers.append(offline)
            settle()
            n, secs, busy, bcpu = embedded_copy(live, offline, live_zk, offline.zk_connect, "backlog",
                                                args.partitions)
            emb = n / secs
            us["B brokers"].append(bcpu / n * 1e6)
            print(f"round {rnd}: B embedded mirror (link) {n:,} msgs {emb:,.0f} msg/s -> {emb / rates[False]:.2f}x of "
                  f"the lean reader, {emb / rates[True]:.2f}x of the checking one; brokers {bcpu / n * 1e6:.2f} us CPU/msg; "
                  f"{machine_line(busy, secs, n)}",
                  flush=True)
            settle()
            b0 = proc_cpu(live) + proc_cpu(offline)
            sn, acked, _committed_s, mcpu, sbusy = mirror_copy(live, offline, live_zk, offline.zk_connect, "backlog",
                                                               args.partitions, 1)
            scpu = mcpu + proc_cpu(live) + proc_cpu(offline) - b0
            drop(brokers.pop())
            st = sn / acked
            us["standalone mirror+brokers"].append(scpu / sn * 1e6)
            print(f"round {rnd}: standalone mirror {sn:,} msgs {st:,.0f} msg/s -> {st / rates[False]:.2f}x of the "
                  f"lean reader; mirror+brokers {scpu / sn * 1e6:.2f} us CPU/msg; {machine_line(sbusy, acked, sn)}",
                  flush=True)
            if args.baseline:
                ratios["baseline/lean"].append(base_rate / rates[False])
                ratios["embedded/baseline"].append(emb / base_rate)
            ratios["embedded/lean"].append(emb / rates[False])
            ratios["embedded/checking"].append(emb / rates[True])
            ratios["standalone/lean"].append(st / rates[False])
            ratios["embedded/standalone"].append(emb / st)
            cpu_ratio.append((busy / n) / (sbusy / sn))
            proc_ratio.append((bcpu / n) / (scpu / sn))
        print(f"medians of {len(cpu_ratio)} rounds: " + ", ".join(f"{k} {statistics.median(v):.2f}x"
                                                                  for k, v in ratios.items())
              + f"; CPU per copied message, link's brokers / standalone mirror+brokers "
              f"{statistics.median(proc_ratio):.2f}, machine embedded/standalone {statistics.median(cpu_ratio):.2f}; "
              + ", ".join(f"{k} {statistics.median(v):.2f} us" for k, v in us.items() if v), flush=True)
    finally:
        drop_scratch(tmp, zk, brokers)


if __name__ == "__main__":
    main()
