"""Warehouse load throughput (issue 19): `ferry load` of the demo's Avro topics, end to end, against two
references measured in the same run.

Starts a local ZooKeeper and one broker (ferry.embedded), produces N events per topic of the demo's schemas
(page views, clicks, searches: schemas/events, ~130-160-byte Avro bodies, lz4 batches from the audited
librdkafka Producer) spread over two hours, then, in one Spark session (local[2]), repeats R times:

- split   : the split reader alone (loaders.datasource.read_split, the load's own reader: values and
            timestamps, every batch's CRC-32C checked), every split one after the other in this process
- load    : a full committed run (LoadJob.run: plan, read + parse + decode + Parquet on the executors,
            table evolution, ledger commit, metastore, warehouse audit counts) into a fresh ledger/database
- pyarrow : the rows that load wrote, read into memory first, written again with pyarrow alone (one file
            per topic and hour, snappy, one thread): the practical limit of the Parquet part
- small   : `--small` more events per topic loaded by the next run on the same ledger (into the same hours):
            the fixed cost of a run with little data

and prints medians, µs per row, the ratios, the load's own time split (run stages; executors' fetch,
parse, decode, write summed over splits) and the load average around each step.

    .venv/bin/python bench/bench_load.py [--events 400000] [--repeat 3] [--partitions 4]
        [--max-per-split 250000] [--small 300] [--writer auto|arrow|spark] [--json FILE]

The harness also runs on a checkout from before issue 19 (no native parts, no stage times): lay the checkout
out as the ``ferry`` package (ferry/ plus wire, zk, ... as its subpackages) and put that on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

# the checkout after everything installed: an installed ferry (bench/on_wheel.py's fresh venv) stays the one imported
sys.path.append(str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

HOUR_MS = 3_600_000


def produce(zk: str, bootstrap: str, topic: str, event: str, n: int, start_ms: int, seed: int) -> float:
    """``n`` demo events of type ``event`` over two hours from ``start_ms``; returns the seconds it took."""
    from ferry.client.producer import Producer
    from ferry.schemas.events import load, sample
    from ferry.schemas.registry import SchemaRegistry
    from ferry.schemas.wire import AvroSerializer

    rng = random.Random(seed)
    with SchemaRegistry(zk) as reg:
        ser = AvroSerializer(reg, topic, load(event))
        pool = [ser(sample(event, rng, start_ms)) for _ in range(2000)]  # encoding is not what we time
        t0 = time.perf_counter()
        with Producer(bootstrap=bootstrap, application="bench-load", audit_interval_s=3600) as p:
            span = 2 * HOUR_MS
            for i in range(n):
                p.send(topic, pool[i % len(pool)], timestamp_ms=start_ms + (i * span) // n)
            assert p.flush(300) == 0
        return time.perf_counter() - t0


def split_reader(plan, bootstrap: str) -> tuple[int, float]:
    import inspect

    from ferry.loaders.datasource import OffsetSplit, read_split

    lean = {"keys": False, "headers": False} if "keys" in inspect.signature(read_split).parameters else {}
    rows, t0 = 0, time.perf_counter()
    for i, s in enumerate(plan.splits):
        for batch in read_split(OffsetSplit(i, s.topic, s.partition, s.start, s.end), bootstrap, 60, 20_000, **lean):
            rows += batch.num_rows
    return rows, time.perf_counter() - t0


def pyarrow_write(table_roots: list[Path], run_id: str, out: Path) -> tuple[int, float]:
    """Re-write the rows a run wrote (read first, not timed) with pyarrow alone."""
    import pyarrow.parquet as pq

    tables = []
    for root in table_roots:
        for version in sorted(root.glob(f"dt=*/hr=*/ferry_run={run_id}")):
            files = [f for f in sorted(version.iterdir()) if f.name.endswith(".parquet")]
            tables.append(pq.read_table(files))
    out.mkdir(parents=True, exist_ok=True)
    rows, t0 = 0, time.perf_counter()
    for i, table in enumerate(tables):
        pq.write_table(table, out / f"{i}.parquet", compression="snappy")
        rows += table.num_rows
    return rows, time.perf_counter() - t0


def cpu_seconds(pids: dict[str, list[int]]) -> dict[str, float]:
    """User + system CPU seconds so far of each group of processes (gone ones count 0)."""
    import psutil

    out = {}
    for name, group in pids.items():
        total = 0.0
        for pid in group:
            try:
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        out[name] = total
    return out


def process_groups(broker_pid: int, zk_pid: int | None) -> dict[str, list[int]]:
    """This process (the driver), the broker, Spark's JVM and its Python workers."""
    import psutil

    me = psutil.Process()
    spark = [p for p in me.children(recursive=True) if p.pid not in (broker_pid, zk_pid)]
    return {"driver": [me.pid], "broker": [broker_pid], "jvm": [p.pid for p in spark if p.name() == "java"],
            "python workers": [p.pid for p in spark if p.name() != "java"]}


def loadavg() -> float:
    return os.getloadavg()[0]


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=400_000, help="events per topic (default 400000)")
    ap.add_argument("--topics", default="page_view,click,search", help="demo event types, one topic each")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-per-split", type=int, default=250_000)
    ap.add_argument("--small", type=int, default=300, help="events per topic of the small run (fixed cost)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--writer", default="auto", choices=("auto", "arrow", "spark"))
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write every measurement here")
    args = ap.parse_args()

    from ferry.embedded import BrokerProcess, ZooKeeperServer
    from ferry.loaders import steps

    try:
        from ferry.loaders import native
    except ImportError:  # before issue 19
        native = None
    from ferry.loaders.load_config import LoadConfig
    from ferry.loaders.load_job import LoadJob
    from ferry.loaders.session import build_session
    from ferry.zk import ClusterRegistry

    root = Path(args.dir or tempfile.mkdtemp(prefix="ferry-bench-load-"))
    zk_server = ZooKeeperServer(data_dir=root / "zk").start()
    zk = zk_server.connect + "/bench/offline"
    broker = BrokerProcess(1, root / "broker-1", zk, "offline").start()
    events = [e.strip() for e in args.topics.split(",") if e.strip()]
    suffix = uuid.uuid4().hex[:6]
    topics = {e: f"{e}s_{suffix}" for e in events}
    out: dict = {"args": vars(args), "native": native.available() if native else None, "runs": []}
    try:
        with ClusterRegistry(zk) as reg:
            for t in topics.values():
                reg.create_topic(t, args.partitions)
            reg.create_topic("_audit", 1)
            reg.create_topic(f"warm_{suffix}", 1)
        now = int(time.time() * 1000)
        start = now - now % HOUR_MS - 3 * HOUR_MS
        for k, (event, topic) in enumerate(topics.items()):
            secs = produce(zk, broker.bootstrap, topic, event, args.events, start, k)
            print(f"produced {args.events} {event} events in {secs:.1f} s", flush=True)
        produce(zk, broker.bootstrap, f"warm_{suffix}", "page_view", 100, start, 99)

        t0 = time.perf_counter()
        old = "parquet_writer" not in LoadConfig.__dataclass_fields__  # a checkout before issue 19 (A/B)
        spark = build_session(root / "spark-state", master=args.master, conf={"spark.ui.showConsoleProgress": "false"},
                              **({} if old else {"quick_jit": args.writer != "spark"}))
        session_s = time.perf_counter() - t0

        def config(r: int, names: list[str]) -> LoadConfig:
            return LoadConfig(zookeeper=zk, topics=names, state_dir=str(root / f"state-{r}"),
                              warehouse=str(root / f"warehouse-{r}"), database=f"bench_{r}", include_audit=False,
                              max_per_split=args.max_per_split, quiet=True,
                              **({} if old else {"parquet_writer": args.writer}))

        t0 = time.perf_counter()
        LoadJob(config(0, [f"warm_{suffix}"]), spark).run()  # JVM metastore, Python workers, imports
        first_s = time.perf_counter() - t0
        print(f"session start {session_s:.1f} s, first run (100 events: metastore, Python workers) {first_s:.1f} s",
              flush=True)
        for r in range(1, args.repeat + 1):
            cfg = config(r, list(topics.values()))
            plan = steps.plan(cfg)
            m: dict = {"repeat": r, "loadavg_start": loadavg()}
            rows, secs = split_reader(plan, broker.bootstrap)
            m.update(split_rows=rows, split_s=secs, loadavg_split=loadavg())
            groups = process_groups(broker.pid, zk_server.pid)
            cpu0 = cpu_seconds(groups)
            t0 = time.perf_counter()
            result = LoadJob(cfg, spark).run()
            m.update(load_rows=result.rows, load_s=time.perf_counter() - t0, loadavg_load=loadavg(),
                     stages=getattr(result, "stages", {}), executors={})
            cpu1 = cpu_seconds(groups)
            m["cpu"] = {k: cpu1[k] - cpu0[k] for k in cpu0}
            for tr in result.topics:
                for k, v in getattr(tr, "stages", {}).items():  # the run's one Spark job is every topic's driver_job
                    m["executors"][k] = max(m["executors"].get(k, 0.0), v) if k == "driver_job" else (
                        m["executors"].get(k, 0.0) + v)
            roots = [Path(root / f"warehouse-{r}" / f"bench_{r}" / t) for t in topics.values()]
            rows, secs = pyarrow_write(roots, result.run_id, root / f"pyarrow-{r}")
            m.update(pyarrow_rows=rows, pyarrow_s=secs)
            for k, (event, topic) in enumerate(topics.items()):
                produce(zk, broker.bootstrap, topic, event, args.small, start + HOUR_MS, 100 * r + k)
            t0 = time.perf_counter()
            small = LoadJob(cfg, spark).run()
            m.update(small_rows=small.rows, small_s=time.perf_counter() - t0, small_stages=getattr(small, "stages", {}),
                     loadavg_end=loadavg())
            out["runs"].append(m)
            print(json.dumps(m), flush=True)
        spark.stop()
    finally:
        broker.stop()
        zk_server.stop()
    report(out, session_s, first_s)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


def report(out: dict, session_s: float, first_s: float) -> None:
    runs = out["runs"]

    def rate(kind: str) -> float:
        return median([m[f"{kind}_rows"] / m[f"{kind}_s"] for m in runs])

    load, split, pa_ = rate("load"), rate("split"), rate("pyarrow")
    rows = runs[0]["load_rows"]
    print(f"\nnative decoders: {out['native']}; {rows:,} rows per load; medians of {len(runs)} repeats; load "
          f"average {min(m['loadavg_start'] for m in runs):.1f}-{max(m['loadavg_end'] for m in runs):.1f}")
    print("| measurement | rows/s | µs/row | vs load |")
    print("| --- | ---: | ---: | ---: |")
    for name, r in (("ferry load, end to end (2 cores)", load), ("split reader alone (1 core)", split),
                    ("pyarrow Parquet write alone (1 core)", pa_)):
        print(f"| {name} | {r:,.0f} | {1e6 / r:.2f} | {r / load:.2f}× |")
    small = median([m["small_s"] for m in runs])
    print(f"| small run ({runs[0]['small_rows']} rows into existing hours) | | | {small:.2f} s |")
    stages = {k: median([m["stages"].get(k, 0.0) for m in runs]) for k in runs[0]["stages"]}
    execs = {k: median([m["executors"].get(k, 0.0) for m in runs]) for k in runs[0]["executors"]}
    print("load run stages (s): " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
    print("  topics split (s): " + ", ".join(f"{k} {v:.2f}" for k, v in execs.items())
          + "  [fetch/parse/decode/write: executors' time summed over splits]")
    print("  executors µs/row: " + ", ".join(f"{k} {v / rows * 1e6:.2f}" for k, v in execs.items()
                                              if not k.startswith("driver")))
    cpu = {k: median([m["cpu"][k] for m in runs]) for k in runs[0]["cpu"]}
    print("CPU during the load (s): " + ", ".join(f"{k} {v:.2f} ({v / rows * 1e6:.2f} µs/row)" for k, v in cpu.items())
          + f"; the load took {median([m['load_s'] for m in runs]):.2f} s on 2 cores")
    sstages = {k: median([m["small_stages"].get(k, 0.0) for m in runs]) for k in runs[0]["small_stages"]}
    print("small run stages (s): " + ", ".join(f"{k} {v:.2f}" for k, v in sstages.items()))
    print(f"session start {session_s:.1f} s, first run of the session {first_s:.1f} s (not in the figures above)")


if __name__ == "__main__":
    sys.exit(main())
