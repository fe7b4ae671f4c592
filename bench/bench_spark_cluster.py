"""The same load in local mode and on a Spark standalone cluster with 1 and then 2 workers (issue 40).

Starts ZooKeeper and one broker (ferry.embedded), produces N page-view events (the demo's schema) into one
topic, then runs `ferry load` as a child process, each time into a fresh state directory (ledger, Derby,
warehouse) on the same events: ``local[2]``; a master with one worker (1 core, 1 GB); the same master once
a second worker joined. Reports rows/s of the run's executor job (stage ``topics``), the run end to end
(session start included), tasks, the splits' own CPU per row (thread time of fetch, parse, decode and
write in the executors' Python workers) and the overhead per task (a task's run time beyond its split's own
wall time: Python worker, scheduling, results).
On one host the point is CPU per row and overhead per task, not speed-up.

    .venv/bin/python bench/bench_spark_cluster.py [--events 200000] [--max-per-split 25000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

HOUR_MS = 3_600_000


def produce(zk: str, bootstrap: str, topic: str, n: int) -> None:
    from ferry.client.producer import Producer
    from ferry.schemas.events import load, sample
    from ferry.schemas.registry import SchemaRegistry
    from ferry.schemas.wire import AvroSerializer

    rng = random.Random(40)
    start = int(time.time() * 1000) // HOUR_MS * HOUR_MS - 3 * HOUR_MS
    with SchemaRegistry(zk) as reg:
        ser = AvroSerializer(reg, topic, load("page_view"))
        pool = [ser(sample("page_view", rng, start)) for _ in range(2000)]
        with Producer(bootstrap=bootstrap, application="bench-cluster", audit_interval_s=3600) as p:
            for i in range(n):
                p.send(topic, pool[i % len(pool)], timestamp_ms=start + (i * 2 * HOUR_MS) // n)
            assert p.flush(120) == 0


def load(zk: str, topic: str, master: str, work: Path, max_per_split: int) -> dict:
    state, out = work / f"state-{uuid.uuid4().hex[:6]}", work / f"load-{uuid.uuid4().hex[:6]}.json"
    cmd = [sys.executable, "-m", "ferry.cli", "load", "--zookeeper", zk, "--topics", topic, "--state-dir", str(state),
           "--database", "b", "--max-per-split", str(max_per_split), "--master", master, "--json", str(out),
           "--conf", "spark.ui.showConsoleProgress=false", "--conf", "spark.executor.memory=768m",
           "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0"]
    t0 = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t0
    if run.returncode:
        raise SystemExit(f"{master}: load failed\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    result = json.loads(out.read_text())
    topics_s = result["stages"]["topics"]
    ex = result["executors"]
    task_s = sum(e["task_seconds"] for e in ex)
    tasks = sum(e["tasks"] for e in ex)
    # the splits' own CPU (thread time of fetch, parse, decode, write in the Python workers) and wall time
    split = [t["stages"] for t in result["topics"]]
    cpu_s = sum(st.get(k, 0.0) for st in split for k in ("fetch", "parse", "decode", "write"))
    split_wall_s = sum(st.get("split_wall", 0.0) for st in split)
    return {"master": master, "rows": result["rows"], "wall_s": round(wall, 1), "topics_s": round(topics_s, 1),
            "rows_per_s_job": round(result["rows"] / topics_s), "rows_per_s_wall": round(result["rows"] / wall),
            "tasks": tasks, "task_s": round(task_s, 1),
            "task_us_per_row": round(task_s * 1e6 / result["rows"], 2) if task_s else None,
            "split_cpu_us_per_row": round(cpu_s * 1e6 / result["rows"], 2),
            "split_wall_s": round(split_wall_s, 1),
            "overhead_per_task_s": round((task_s - split_wall_s) / tasks, 2) if tasks else None,
            "workers": sorted({e["worker"] for e in ex if e["tasks"]}),
            "executors": ex, "loadavg": os.getloadavg()[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-per-split", type=int, default=25_000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from ferry.embedded import BrokerProcess, ZooKeeperServer
    from ferry.spark_standalone import SparkStandalone
    from ferry.zk import ClusterRegistry

    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    rows = []
    zk_server = ZooKeeperServer(data_dir=work / "zk").start()
    zk = f"{zk_server.connect}/bench"
    broker = BrokerProcess(1, work / "broker-1", zk, "offline").start()
    cluster = SparkStandalone(work / "spark", workers=2, cores=1, memory="1g")
    try:
        topic = "page_view_bench"
        with ClusterRegistry(zk) as reg:
            reg.create_topic("_audit", 1)
            reg.create_topic(topic, args.partitions)
        produce(zk, broker.bootstrap, topic, args.events)
        rows.append(load(zk, topic, "local[2]", work, args.max_per_split))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "executors"}), flush=True)
        cluster.master.start(300)
        cluster.workers[0].start(300)
        cluster.master.wait_workers(1, 300)
        rows.append(load(zk, topic, cluster.url, work, args.max_per_split) | {"cluster_workers": 1})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "executors"}), flush=True)
        cluster.workers[1].start(300)  # a worker added: the next run uses it
        cluster.master.wait_workers(2, 300)
        rows.append(load(zk, topic, cluster.url, work, args.max_per_split) | {"cluster_workers": 2})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "executors"}), flush=True)
    finally:
        cluster.stop()
        broker.stop()
        zk_server.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
