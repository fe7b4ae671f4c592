"""The Spark-cluster integration test's workload, run INSIDE the `airflow` container (ferry-loader image) as
`python - MODE ARGS < spark_workload.py`; the last line of each mode is `RESULT <json>`.

    produce --zookeeper ZK --topic T --partitions P --count N --hour-ms H
            N page-view events (Avro, the registry's schema) with distinct guids and event times spread over
            the hour H, sent as message sets of 2,000 by ferry's MessageSetProducer (the paper's bulk API);
            the acknowledged ones are counted per 10-minute bucket as tier `producer` and published to
            `_audit` once everything is acknowledged: {"produced": n, "audit_events": k}
    dag     --config YAML --hour-ms H
            `ferry_load_<group>` of the DAG file for the hour H (dag.test(), Airflow's SQLite under
            $AIRFLOW_HOME): {"state": ..., "tasks": {task: state}}
    watch   --victim HOST --timeout S
            polls the running load's driver (its REST API on 127.0.0.1:4040) and prints `EXECUTORS <json>`
            (host -> completed/active tasks, alive) each time that changes; `BUSY` once the victim's executor
            has finished a task and runs another (the moment to kill its worker); ends when the application
            is gone after it was seen
"""

from __future__ import annotations

import argparse
import json
import sys
import time

HOUR_MS = 3_600_000
SET_SIZE = 2000


def produce(args: argparse.Namespace) -> dict:
    import random
    import uuid
    from pathlib import Path

    import ferry.schemas
    from ferry.client.audit.counter import AuditCounter
    from ferry.client.audit.event import AUDIT_TOPIC
    from ferry.client.message_set_producer import MessageSetProducer
    from ferry.schemas.registry import SchemaRegistry, subject_for_topic
    from ferry.schemas.wire import AvroSerializer
    from ferry.wire.record.message_set_builder import MessageSetBuilder
    from ferry.zk.cluster_registry import ClusterRegistry
    from ferry.zk.errors import TopicExistsError

    reg = ClusterRegistry(args.zookeeper).start()
    try:
        for topic, n in ((args.topic, args.partitions), (AUDIT_TOPIC, 1)):
            try:
                reg.create_topic(topic, n)
            except TopicExistsError:
                pass
    finally:
        reg.stop()
    schema = (Path(ferry.schemas.__file__).resolve().parent / "events" / "page_view.avsc").read_text()
    rng = random.Random(40)
    counter = AuditCounter("producer", "spark-integration", "offline")
    pending: dict[int, list[int]] = {}  # set seq -> its event times, counted when acknowledged

    def acked(ack) -> None:
        for ts in pending.pop(ack.seq, ()):  # `_audit`'s own set is not counted
            counter.count(ack.topic, ts)

    n, t0, builder = args.count, time.monotonic(), MessageSetBuilder()
    with SchemaRegistry(args.zookeeper) as sr:
        ser = AvroSerializer(sr, subject_for_topic(args.topic), schema)
        with MessageSetProducer(zookeeper=args.zookeeper, acks=-1, on_ack=acked, metadata_wait_s=30) as producer:
            for start in range(0, n, SET_SIZE):
                times = [args.hour_ms + (i * HOUR_MS) // n for i in range(start, min(n, start + SET_SIZE))]
                values = [ser({"event_time": ts, "host": f"app{i % 16}", "guid": str(uuid.UUID(int=rng.getrandbits(128),
                                                                                              version=4)),
                               "member_id": i if i % 3 else None, "session_id": f"s{i % 5000}",
                               "page": f"p{i % 7}", "path": f"/in/m{i % 1000}", "response_ms": i % 250})
                          for i, ts in zip(range(start, start + len(times)), times, strict=True)]
                # a set's Ack comes from a later send() or flush(): its times are recorded in time
                seq = producer.send(args.topic, (start // SET_SIZE) % args.partitions, builder.build(values, times))
                pending[seq] = times
            producer.flush()
            produced = counter.delivered
            events = counter.snapshot_and_reset()
            producer.send_and_wait(AUDIT_TOPIC, 0, [e.to_json() for e in events])
    return {"produced": produced, "audit_events": len(events), "seconds": round(time.monotonic() - t0, 1)}


def dag(args: argparse.Namespace) -> dict:
    import datetime as dt

    sys.path.insert(0, "/opt/ferry/dags")
    from ferry_dag_factory import build_dag, load_config

    cfg = load_config(args.config)[0]
    logical = dt.datetime.fromtimestamp(args.hour_ms / 1000, dt.UTC) + dt.timedelta(hours=1)
    run = build_dag(cfg).test(logical_date=logical)
    return {"state": str(run.state), "tasks": {ti.task_id: str(ti.state) for ti in run.get_task_instances()}}


def _get(url: str):
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def watch(args: argparse.Namespace) -> dict:
    base = "http://127.0.0.1:4040/api/v1/applications"
    deadline = time.monotonic() + args.timeout
    seen_app, busy, last = None, False, None
    while time.monotonic() < deadline:
        try:
            apps = _get(base)
            app = apps[0]["id"]
            execs = _get(f"{base}/{app}/allexecutors")
        except (OSError, ValueError, IndexError, KeyError) as e:
            refused = isinstance(getattr(e, "reason", e), ConnectionRefusedError)
            if seen_app and refused:
                break  # the load's driver is gone (a busy one that answers slowly is not)
            time.sleep(0.3)
            continue
        seen_app = app
        now = {e["hostPort"].rsplit(":", 1)[0]: {"completed": e["completedTasks"], "active": e["activeTasks"],
                                                 "alive": e["isActive"]}
               for e in execs if e["id"] != "driver"}
        if now != last:
            print("EXECUTORS " + json.dumps(now), flush=True)
            last = now
        v = now.get(args.victim)
        if not busy and v and v["alive"] and v["completed"] >= 1 and v["active"] >= 1:
            busy = True
            print("BUSY", flush=True)
        time.sleep(0.3)
    return {"app": seen_app, "executors": last, "busy": busy}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["produce", "dag", "watch"])
    ap.add_argument("--zookeeper")
    ap.add_argument("--topic", default="page_view")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--hour-ms", type=int, default=0)
    ap.add_argument("--config")
    ap.add_argument("--victim")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    result = {"produce": produce, "dag": dag, "watch": watch}[args.mode](args)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
