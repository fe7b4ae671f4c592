"""The embedded mirror's backlog copy against a bare MessageSetConsumer and the standalone mirror, in one run
(issue 39's first bar, measured on a first slice).

ZooKeeper, one live and one offline `ferry broker` (the offline one runs the embedded mirror). Backlog:
``--messages`` 200-byte messages in sets of 50 over ``--partitions`` partitions (bench_mirror_pipeline.py's
fill). Each round: the MessageSetConsumer reads the whole live topic in a process of its own (lean, then
checking CRCs); a new mirror link (with a new producer id: the deleted links' kept ids are forgotten) copies the
whole topic into the offline cluster (clock from the first copied
message visible offline to the last: the offline high watermark); then the standalone `ferry mirror`
(MirrorMaker, in this process) copies it once more. Each copy appends behind the earlier rounds' copies in the
same offline topic. Machine CPU per message covers every process (both brokers, the mirror, the kernel).

A/B in one run: a second offline cluster whose broker runs another checkout (``--baseline``, first on its
PYTHONPATH; a checkout's ``ferry/`` folder needs links to its package folders and its native parts built, as
bench/ab_mirror.py explains) copies the topic by a link of its own in each round, just before this checkout's
copy (B). Without ``--baseline`` the A arm runs this checkout too (an A/A run: the noise floor).

    .venv/bin/python bench/bench_embedded_mirror.py [--messages 2000000] [--rounds 3] [--baseline CHECKOUT]
        [--offline-override KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kazoo.exceptions import NoNodeError

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

from ferry.client.wire_client import WireClient  # noqa: E402
from ferry.embedded import BrokerProcess, ZooKeeperServer  # noqa: E402
from ferry.zk.cluster_registry import ClusterRegistry  # noqa: E402
from ferry.zk.mirror_links import id_path  # noqa: E402


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
        _forget_producer_id(offline_zk, name)
        watch.close()


def _forget_producer_id(zk: str, name: str) -> None:
    """A deleted link's kept producer id (zk/mirror_links.py) would go to the next round's new link, which would
    then resume at the live end and copy nothing: each round forgets it, so each round copies the whole topic."""
    with ClusterRegistry(zk) as reg:
        try:
            reg.client.delete(id_path(name))
        except NoNodeError:
            pass


def _own_log(broker: BrokerProcess) -> BrokerProcess:
    """The three brokers all have id 1: each writes its own log file (``<data dir>.out``), not one shared."""
    broker.log_file = broker.data_dir.with_name(broker.data_dir.name + ".out")
    return broker


def _has_topic(zk: str, topic: str) -> bool:
    with ClusterRegistry(zk) as reg:
        return reg.topic(topic) is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", metavar="CHECKOUT", help="the A arm's checkout (default: this one)")
    ap.add_argument("--offline-override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting of both offline brokers (their --override), e.g. "
                         "log.consumers.see.unflushed=true: the copy's clock then stops at the appended end, not the "
                         "flushed one (with the default log.flush.interval.messages, an fsync per answer)")
    args = ap.parse_args()
    # `python -m` puts the working directory first on a broker's path: from inside a checkout its ferry/ would win
    # over PYTHONPATH (bench_small_requests.py does the same)
    os.chdir(tempfile.gettempdir())
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-embedded-"))
    zk = ZooKeeperServer(data_dir=tmp / "zk").start()
    brokers: list[BrokerProcess] = []
    ratios: dict[str, list[float]] = {"baseline/lean": [], "embedded/baseline": [], "embedded/lean": [], "embedded/checking": [], "standalone/lean": [],
                                      "embedded/standalone": []}
    cpu_ratio: list[float] = []
    broker_us: dict[str, list[float]] = {"A": [], "B": []}
    try:
        live_zk, offline_zk = f"{zk.connect}/b/live", f"{zk.connect}/b/offline"
        live = _own_log(BrokerProcess(1, tmp / "live", live_zk, "live")).start()
        overrides = [a for kv in args.offline_override for a in ("--override", kv)]
        offline = _own_log(BrokerProcess(1, tmp / "offline", offline_zk, "offline", extra_args=overrides)).start()
        brokers += [live, offline]
        base_zk = f"{zk.connect}/b/offline-a"
        saved = os.environ.get("PYTHONPATH")
        if args.baseline:
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (args.baseline, saved) if p)
        try:
            baseline = _own_log(BrokerProcess(1, tmp / "offline-a", base_zk, "offline", extra_args=overrides)).start()
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
        brokers.append(baseline)
        with ClusterRegistry(live_zk) as reg:
            reg.create_topic("backlog", args.partitions)
        time.sleep(1.0)
        fill(live.bootstrap, "backlog", args.messages, args.partitions)
        time.sleep(1.0)
        for rnd in range(args.rounds):
            rates = {check: read_phase(live.bootstrap, "backlog", args.partitions, check, f"round {rnd}")
                     for check in (False, True)}
            settle()
            an, asecs, abusy, acpu = embedded_copy(live, baseline, live_zk, base_zk, "backlog", args.partitions)
            base_rate = an / asecs
            broker_us["A"].append(acpu / an * 1e6)
            print(f"round {rnd}: A link {an:,} msgs {base_rate:,.0f} msg/s -> {base_rate / rates[False]:.2f}x "
                  f"of the lean reader; brokers {acpu / an * 1e6:.2f} us CPU/msg; {machine_line(abusy, asecs, an)}",
                  flush=True)
            settle()
            n, secs, busy, bcpu = embedded_copy(live, offline, live_zk, offline_zk, "backlog", args.partitions)
            emb = n / secs
            broker_us["B"].append(bcpu / n * 1e6)
            print(f"round {rnd}: B embedded mirror (link) {n:,} msgs {emb:,.0f} msg/s -> {emb / rates[False]:.2f}x of "
                  f"the lean reader, {emb / rates[True]:.2f}x of the checking one; brokers {bcpu / n * 1e6:.2f} us CPU/msg; "
                  f"{machine_line(busy, secs, n)}",
                  flush=True)
            settle()
            sn, _acked, _committed_s, _cpu, sbusy = mirror_copy(live, offline, live_zk, offline_zk, "backlog",
                                                                args.partitions, 1)
            st = sn / _acked
            print(f"round {rnd}: standalone mirror {sn:,} msgs {st:,.0f} msg/s -> {st / rates[False]:.2f}x of the "
                  f"lean reader; {machine_line(sbusy, _acked, sn)}", flush=True)
            ratios["baseline/lean"].append(base_rate / rates[False])
            ratios["embedded/baseline"].append(emb / base_rate)
            ratios["embedded/lean"].append(emb / rates[False])
            ratios["embedded/checking"].append(emb / rates[True])
            ratios["standalone/lean"].append(st / rates[False])
            ratios["embedded/standalone"].append(emb / st)
            cpu_ratio.append((busy / n) / (sbusy / sn))
        print("medians: " + ", ".join(f"{k} {statistics.median(v):.2f}x" for k, v in ratios.items())
              + f"; machine CPU per message, embedded/standalone {statistics.median(cpu_ratio):.2f}; brokers' CPU per "
              f"message A {statistics.median(broker_us['A']):.2f} us, B {statistics.median(broker_us['B']):.2f} us",
              flush=True)
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
