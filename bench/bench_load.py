"""Warehouse load throughput: rows/s of `ferry load` against reading the same rows back from Parquet.

Starts a local ZooKeeper and one broker (ferry.embedded), produces N Avro page-view events spread over two
hours, then measures with one Spark session (local[2] by default):

- source:  ``format("ferry")`` alone into Spark's no-op sink (the Python data source, Arrow batches)
- load:    a full committed load run (read + Avro decode + Parquet write + ledger commit + metastore)
- parquet: the loaded table read back in full (all columns) into the no-op sink

    .venv/bin/python bench/bench_load.py --messages 200000 [--master local[2]] [--max-per-split 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

SCHEMA = {
    "type": "record", "name": "PageView", "namespace": "ferry.bench",
    "fields": [
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "member_id", "type": ["null", "long"], "default": None},
        {"name": "session_id", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "path", "type": "string"},
        {"name": "response_ms", "type": "int"},
    ],
}


def produce(zk: str, bootstrap: str, topic: str, n: int, start_ms: int) -> float:
    from ferry.client.producer import Producer
    from ferry.schemas.registry import SchemaRegistry
    from ferry.schemas.wire import AvroSerializer

    with SchemaRegistry(zk) as reg:
        ser = AvroSerializer(reg, topic, SCHEMA)
        t0 = time.perf_counter()
        with Producer(bootstrap=bootstrap, application="bench-load", audit_interval_s=3600) as p:
            span = 2 * 3_600_000
            for i in range(n):
                ts = start_ms + (i * span) // n
                p.send(topic, ser({"event_time": ts, "member_id": i, "session_id": f"s{i % 5000}",
                                   "page": f"page{i % 40}", "path": f"/in/member{i % 100000}",
                                   "response_ms": i % 900}), timestamp_ms=ts)
            assert p.flush(300) == 0
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--max-per-split", type=int, default=100_000)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args()

    from ferry.embedded import BrokerProcess, ZooKeeperServer
    from ferry.loaders.load_config import LoadConfig
    from ferry.loaders.load_job import LoadJob
    from ferry.loaders.session import build_session
    from ferry.zk import ClusterRegistry

    root = Path(args.dir or tempfile.mkdtemp(prefix="ferry-bench-load-"))
    zk_server = ZooKeeperServer(data_dir=root / "zk").start()
    zk = zk_server.connect + "/bench/offline"
    broker = BrokerProcess(1, root / "broker-1", zk, "offline").start()
    results: dict[str, float] = {}
    try:
        topic = f"page_views_{uuid.uuid4().hex[:6]}"
        with ClusterRegistry(zk) as reg:
            reg.create_topic(topic, args.partitions)
            reg.create_topic("_audit", 1)
        now = int(time.time() * 1000)
        secs = produce(zk, broker.bootstrap, topic, args.messages, now - now % 3_600_000 - 3 * 3_600_000)
        results["produce_rows_per_s"] = args.messages / secs
        print(f"produced {args.messages} events in {secs:.1f} s ({args.messages / secs:,.0f}/s)", flush=True)

        spark = build_session(root / "state", master=args.master,
                              conf={"spark.ui.showConsoleProgress": "false"})
        spark.range(1).collect()  # session warm-up is not part of any measurement

        t0 = time.perf_counter()
        (spark.read.format("ferry").option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest").option("endingOffsets", "latest")
         .option("maxRecordsPerPartition", str(args.max_per_split)).load()
         .write.format("noop").mode("overwrite").save())
        secs = time.perf_counter() - t0
        results["source_rows_per_s"] = args.messages / secs
        print(f"source : {args.messages} rows in {secs:.1f} s = {args.messages / secs:,.0f} rows/s", flush=True)

        cfg = LoadConfig(zookeeper=zk, topics=[topic], state_dir=str(root / "state"), include_audit=False,
                         max_per_split=args.max_per_split, quiet=True)
        t0 = time.perf_counter()
        result = LoadJob(cfg, spark).run()
        secs = time.perf_counter() - t0
        assert result.rows == args.messages, result.rows
        results["load_rows_per_s"] = args.messages / secs
        print(f"load   : {args.messages} rows in {secs:.1f} s = {args.messages / secs:,.0f} rows/s "
              "(read + decode + write + commit)", flush=True)

        t0 = time.perf_counter()
        spark.table(f"ferry.{topic}").write.format("noop").mode("overwrite").save()
        secs = time.perf_counter() - t0
        results["parquet_rows_per_s"] = args.messages / secs
        print(f"parquet: {args.messages} rows in {secs:.1f} s = {args.messages / secs:,.0f} rows/s "
              "(the loaded table read back, all columns)", flush=True)
        print(json.dumps({k: round(v) for k, v in results.items()}))
        spark.stop()
    finally:
        broker.stop()
        zk_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
