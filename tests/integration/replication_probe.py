"""Replication probes, run INSIDE a ferry container as `python - MODE ARGS < replication_probe.py`.

The datacenter networks are internal (nothing outside them reaches a broker), so whatever talks to the
brokers or to ZooKeeper runs in a container on the network; results come back as `RESULT <json>` lines
on stdout (and, for `produce`, one line per delivery report as it happens).

    create  --zookeeper ZK --topic T --partitions N --replication-factor R --min-isr M [--timeout S]
            the topic, then waits until every partition has a leader and a full ISR; prints the states
    state   --zookeeper ZK --topic T [--partition P] [--leader-not B] [--epoch-above E] [--isr-size N]
            [--timeout S]   waits (bounded) until the partition's state znode satisfies every condition given
            and prints it ({"ok": false, ...} with the last state seen when it never did)
    produce --bootstrap B --topic T [--partition P] --rate R --max N --duration S
            an acks=all idempotent confluent-kafka producer of values "%08d" % i, i = 0, 1, ... at R per
            second until "stop" (or EOF) on stdin, N values or S seconds; prints `ACK i partition offset`,
            `FAIL i code name` and `ERROR code name fatal text` lines as librdkafka reports them, then a RESULT
    consume --bootstrap B --topic T [--partition P] [--timeout S]
            reads the partition from its log start to its high watermark (from the leader, as any consumer);
            prints {"low": l, "high": h, "records": [[offset, value], ...]}
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _state_doc(st) -> dict:
    return {"leader": st.leader, "leader_epoch": st.leader_epoch, "isr": list(st.isr),
            "controller_epoch": st.controller_epoch}


def create(args: argparse.Namespace) -> dict:
    from ferry.zk.cluster_registry import ClusterRegistry

    reg = ClusterRegistry(args.zookeeper).start()
    try:
        reg.create_topic(args.topic, args.partitions, {"min.insync.replicas": str(args.min_isr)},
                         replication_factor=args.replication_factor)
        deadline = time.monotonic() + args.timeout
        states: dict = {}
        while time.monotonic() < deadline:
            states = reg.partition_states(args.topic)
            if all(st.leader >= 0 and len(st.isr) == args.replication_factor for st in states.values()):
                return {"ok": True, "states": {p: _state_doc(st) for p, st in states.items()}}
            time.sleep(0.2)
        return {"ok": False, "states": {p: _state_doc(st) for p, st in states.items()}}
    finally:
        reg.stop()


def state(args: argparse.Namespace) -> dict:
    from ferry.zk.cluster_registry import ClusterRegistry

    def satisfied(st) -> bool:
        return ((args.leader_not is None or st.leader not in (args.leader_not, -1))
                and (args.epoch_above is None or st.leader_epoch > args.epoch_above)
                and (args.isr_size is None or (len(st.isr) == args.isr_size and st.leader >= 0)))

    reg = ClusterRegistry(args.zookeeper).start()
    try:
        deadline = time.monotonic() + args.timeout
        while True:
            st = reg.partition_states(args.topic)[args.partition]
            if satisfied(st) or time.monotonic() >= deadline:
                return {"ok": satisfied(st), **_state_doc(st)}
            time.sleep(0.1)
    finally:
        reg.stop()


def produce(args: argparse.Namespace) -> dict:
    from confluent_kafka import KafkaException, Producer

    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    fatal: list[str] = []

    def on_error(err) -> None:
        if err.fatal():
            fatal.append(f"{err.name()}: {err.str()}")
        emit(f"ERROR {err.code()} {err.name()} {int(err.fatal())} {err.str()}")

    def on_delivery(err, msg) -> None:
        n = int(msg.value())
        if err is not None:
            emit(f"FAIL {n} {err.code()} {err.name()}")
        else:
            emit(f"ACK {n} {msg.partition()} {msg.offset()}")

    # Retries are bounded by message.timeout.ms. A cut-off leader never answers and its TCP connection never
    # breaks, so librdkafka's client-side timeout of a ProduceRequest (socket.timeout.ms, 60 s by default;
    # request.timeout.ms is only the broker's wait for the ISR) decides when the idempotent producer gives up
    # on the requests in flight there and retries them, same producer id and sequences, at the new leader:
    # until then it sends nothing else for the partition (ordering). 10 s keeps the test short.
    p = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": args.message_timeout_ms, "request.timeout.ms": 5000,
                  "socket.timeout.ms": 10_000, "error_cb": on_error, "log_level": 3})
    t0 = time.monotonic()
    n = 0
    while not stop.is_set() and n < args.max and time.monotonic() - t0 < args.duration and not fatal:
        due = t0 + n / args.rate
        while (wait := due - time.monotonic()) > 0 and not stop.is_set():
            p.poll(wait)  # serves delivery reports; returns early when it served one
        try:
            p.produce(args.topic, b"%08d" % n, partition=args.partition, on_delivery=on_delivery)
            n += 1
        except BufferError:
            p.poll(0.1)
        except KafkaException as e:  # a fatal idempotence error refuses new messages
            fatal.append(str(e))
    left = p.flush(args.message_timeout_ms / 1000 + 10)
    return {"produced": n, "unflushed": left, "fatal": fatal, "seconds": round(time.monotonic() - t0, 1)}


def consume(args: argparse.Namespace) -> dict:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"probe-{time.time_ns()}",
                  "enable.auto.commit": False, "log_level": 3})
    try:
        for attempt in range(6):  # just after a heal the broker handle may be torn down and remade: ask again
            try:
                low, high = c.get_watermark_offsets(TopicPartition(args.topic, args.partition), timeout=10)
                break
            except KafkaException:
                if attempt == 5:
                    raise
                time.sleep(2)
        c.assign([TopicPartition(args.topic, args.partition, low)])
        records: list[list] = []
        pos = low
        deadline = time.monotonic() + args.timeout
        while pos < high and time.monotonic() < deadline:
            for msg in c.consume(1000, timeout=1.0):
                if msg.error() is not None:
                    continue
                if msg.offset() < high:
                    records.append([msg.offset(), msg.value().decode()])
                pos = max(pos, msg.offset() + 1)
        return {"low": low, "high": high, "records": records}
    finally:
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["create", "state", "produce", "consume"])
    ap.add_argument("--zookeeper")
    ap.add_argument("--bootstrap")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partition", type=int, default=0)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--replication-factor", type=int, default=3)
    ap.add_argument("--min-isr", type=int, default=2)
    ap.add_argument("--leader-not", type=int)
    ap.add_argument("--epoch-above", type=int)
    ap.add_argument("--isr-size", type=int)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--max", type=int, default=100_000)
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--message-timeout-ms", type=int, default=90_000)
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    fn = {"create": create, "state": state, "produce": produce, "consume": consume}[args.mode]
    emit("RESULT " + json.dumps(fn(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
