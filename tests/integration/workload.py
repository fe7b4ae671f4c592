"""The integration tests' workload, run INSIDE a ferry container as `python - MODE ARGS < workload.py`.

    setup   --zookeeper LIVE [--partitions N]        topics page_view, click, search (+ _audit), Avro schemas
    publish --zookeeper LIVE --count N --hour-ms H --seed S --app A
            N activity events (ferry's audited Producer, Avro wire format) with event times inside the hour
            starting at H; prints {"topic": produced, ...} and exits 1 if anything was not delivered
    count   --zookeeper ZK [--topics a,b]              per topic: messages in the cluster and distinct
            event guids (decoded with the cluster's schema registry): {"topic": {"total": n, "distinct": n}}
    warehouse --state-dir D --hour-ms H               per table: rows and distinct (_topic,_partition,_offset)
            and distinct guids of the hour in the warehouse (Spark, the loader's own session settings)

publish and count take `--command-config FILE` (librdkafka properties: the secured datacenters' SASL_SSL users).
Everything here uses ferry's own client library, schema registry and loader session.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

TOPICS = ("page_view", "click", "search")
HOUR_MS = 3_600_000


def setup(args: argparse.Namespace) -> dict:
    from pathlib import Path

    import ferry.schemas
    from ferry.schemas.registry import SchemaRegistry, subject_for_topic
    from ferry.zk.cluster_registry import ClusterRegistry
    from ferry.zk.errors import TopicExistsError

    created = []
    reg = ClusterRegistry(args.zookeeper).start()
    try:
        for topic, n in [(t, args.partitions) for t in TOPICS] + [("_audit", 2)]:
            try:
                reg.create_topic(topic, n)
                created.append(topic)
            except TopicExistsError:
                pass
    finally:
        reg.stop()
    events = Path(ferry.schemas.__file__).resolve().parent / "events"
    ids = {}
    with SchemaRegistry(args.zookeeper) as sr:
        for topic in TOPICS:
            ids[topic] = sr.register(subject_for_topic(topic), (events / f"{topic}.avsc").read_text())
    return {"created": created, "schema_ids": ids}


def client_config(args: argparse.Namespace):
    from ferry.wire.client_config import ClientConfig

    return ClientConfig.from_file(args.command_config) if args.command_config else ClientConfig.plaintext()


def publish(args: argparse.Namespace) -> dict:
    from ferry.client.producer import Producer
    from ferry.demo_events import activity_stream
    from ferry.schemas.registry import SchemaRegistry, subject_for_topic
    from ferry.schemas.wire import AvroSerializer

    produced: dict[str, int] = {}
    with SchemaRegistry(args.zookeeper) as sr:
        serializers: dict[str, AvroSerializer] = {}
        producer = Producer(zookeeper=args.zookeeper, application=args.app, datacenter="live",
                            audit_interval_s=1.0, delivery_timeout_ms=args.timeout * 1000,
                            client_config=client_config(args))
        try:
            for ev in activity_stream(args.count, args.hour_ms, args.hour_ms + HOUR_MS, [args.app], args.seed):
                ser = serializers.get(ev.topic)
                if ser is None:
                    ser = serializers[ev.topic] = AvroSerializer(sr, subject_for_topic(ev.topic))
                producer.send(ev.topic, ser.serialize(ev.record), ev.key, timestamp_ms=ev.event_time_ms)
                produced[ev.topic] = produced.get(ev.topic, 0) + 1
        finally:
            undelivered = producer.close(timeout=args.timeout)
    produced["_undelivered"] = undelivered
    return produced


def count(args: argparse.Namespace) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    from ferry.client.bootstrap import bootstrap_string
    from ferry.schemas.registry import SchemaRegistry
    from ferry.schemas.wire import schema_id_of
    from ferry.zk.cluster_registry import ClusterRegistry

    config = client_config(args)
    reg = ClusterRegistry(args.zookeeper).start()
    try:
        brokers = bootstrap_string(reg.brokers(), config.security_protocol)
        topics = {name: info for name, info in reg.topics().items() if name in args.topics.split(",")}
    finally:
        reg.stop()
    result: dict[str, dict] = {}
    if not brokers:
        return {"_error": "no brokers registered"}
    consumer = Consumer({**config.librdkafka(), "bootstrap.servers": brokers, "group.id": f"count-{time.time_ns()}",
                         "enable.auto.commit": False, "log_level": 3})
    import fastavro

    with SchemaRegistry(args.zookeeper, read_only=True) as sr:
        for topic, info in sorted(topics.items()):
            total = 0
            guids: set[str] = set()
            for p in sorted(info.partitions):
                lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if hi <= lo:
                    continue
                consumer.assign([TopicPartition(topic, p, lo)])
                pos = lo
                deadline = time.monotonic() + args.timeout
                while pos < hi and time.monotonic() < deadline:
                    for msg in consumer.consume(2000, timeout=1.0):
                        if msg.error() is not None or msg.offset() >= hi:
                            continue
                        pos = msg.offset() + 1
                        total += 1
                        value = msg.value()
                        schema = sr.parsed(schema_id_of(value))
                        import io

                        record = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema)
                        guids.add(record["guid"])
                if pos < hi:
                    result.setdefault("_incomplete", []).append(f"{topic}-{p}: read to {pos} of {hi}")
            result[topic] = {"total": total, "distinct": len(guids)}
    consumer.close()
    return result


def warehouse(args: argparse.Namespace) -> dict:
    from ferry.loaders.session import build_session

    spark = build_session(args.state_dir)
    out = {}
    for topic in TOPICS:
        if not spark.catalog.tableExists(f"ferry.{topic}"):
            continue
        r = spark.sql(f"SELECT count(*) AS n, count(DISTINCT _topic, _partition, _offset) AS d, "
                      f"count(DISTINCT guid) AS g, min(_event_time) AS lo, max(_event_time) AS hi "
                      f"FROM ferry.{topic}").collect()[0]
        out[topic] = {"rows": r.n, "distinct_offsets": r.d, "distinct_guids": r.g}
    spark.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["setup", "publish", "count", "warehouse"])
    ap.add_argument("--zookeeper")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--hour-ms", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--app", default="frontend")
    ap.add_argument("--topics", default=",".join(TOPICS))
    ap.add_argument("--state-dir")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--command-config", help="librdkafka client properties (publish, count)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    fn = {"setup": setup, "publish": publish, "count": count, "warehouse": warehouse}[args.mode]
    result = fn(args)
    print("RESULT " + json.dumps(result))
    return 1 if result.get("_undelivered") else 0


if __name__ == "__main__":
    sys.exit(main())
