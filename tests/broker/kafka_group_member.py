"""A consumer-group member on a real Kafka client, run as its own process so that a test can SIGKILL it.

Usage: python kafka_group_member.py KIND BOOTSTRAP GROUP TOPIC OUTFILE SESSION_TIMEOUT_MS [INSTANCE_ID]
KIND: confluent | kafka-python | aiokafka; INSTANCE_ID (confluent only): group.instance.id, a static member. The member subscribes to TOPIC (earliest when nothing is committed),
and appends to OUTFILE (line-buffered, so lines survive a SIGKILL):

    a P,P,...          its assignment, at every assignment (empty after a revocation: "a ")
    m P OFFSET VALUE   a message it consumed
    c P OFFSET         a commit that succeeded (OFFSET = next to read)

It commits synchronously after each batch it wrote down, before polling again, so the committed offsets never
lag what it wrote down by more than the batch in flight. SIGTERM: commit, leave the group, exit 0.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time

STOP = False


def _stop(*_: object) -> None:
    global STOP
    STOP = True


class Out:
    def __init__(self, path: str) -> None:
        self.f = open(path, "a", buffering=1)  # noqa: SIM115 - line by line, for the test to read as it goes

    def assigned(self, partitions: list[int]) -> None:
        self.f.write("a " + ",".join(str(p) for p in sorted(partitions)) + "\n")

    def message(self, partition: int, offset: int, value: bytes) -> None:
        self.f.write(f"m {partition} {offset} {value.decode()}\n")

    def committed(self, offsets: dict[int, int]) -> None:
        for p, off in sorted(offsets.items()):
            self.f.write(f"c {p} {off}\n")


def run_confluent(bootstrap: str, group: str, topic: str, out: Out, session_ms: int, instance: str | None = None
                  ) -> None:
    from confluent_kafka import Consumer, KafkaException

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(session_ms // 6, 100), "topic.metadata.refresh.interval.ms": 2000}
    if instance:
        conf["group.instance.id"] = instance
    c = Consumer(conf)
    c.subscribe([topic], on_assign=lambda _c, ps: out.assigned([p.partition for p in ps]),
                on_revoke=lambda _c, ps: out.assigned([]))
    while not STOP:
        msgs = c.consume(num_messages=100, timeout=0.3)
        done: dict[int, int] = {}
        for m in msgs:
            if m.error():
                continue
            out.message(m.partition(), m.offset(), m.value())
            done[m.partition()] = m.offset() + 1
        if done:
            try:
                c.commit(asynchronous=False)
                out.committed(done)
            except KafkaException as e:
                print("commit failed:", e, file=sys.stderr, flush=True)
    c.close()


def run_kafka_python(bootstrap: str, group: str, topic: str, out: Out, session_ms: int) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            out.assigned([])

        def on_partitions_assigned(self, assigned):
            out.assigned([tp.partition for tp in assigned])

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=session_ms,
                      heartbeat_interval_ms=max(session_ms // 6, 100), metadata_max_age_ms=2000)
    c.subscribe([topic], listener=Listener())
    while not STOP:
        batches = c.poll(timeout_ms=300)
        done: dict[int, int] = {}
        for tp, records in batches.items():
            for r in records:
                out.message(tp.partition, r.offset, r.value)
                done[tp.partition] = r.offset + 1
        if done:
            try:
                c.commit()
                out.committed(done)
            except KafkaError as e:
                print("commit failed:", e, file=sys.stderr, flush=True)
    c.close()


async def run_aiokafka(bootstrap: str, group: str, topic: str, out: Out, session_ms: int) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            out.assigned([])

        def on_partitions_assigned(self, assigned):
            out.assigned([tp.partition for tp in assigned])

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, _stop)
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, session_timeout_ms=session_ms,
                         heartbeat_interval_ms=max(session_ms // 6, 100), metadata_max_age_ms=2000)
    await c.start()
    c.subscribe([topic], listener=Listener())
    while not STOP:
        batches = await c.getmany(timeout_ms=300)
        done: dict[int, int] = {}
        for tp, records in batches.items():
            for r in records:
                out.message(tp.partition, r.offset, r.value)
                done[tp.partition] = r.offset + 1
        if done:
            try:
                await c.commit()
                out.committed(done)
            except KafkaError as e:
                print("commit failed:", e, file=sys.stderr, flush=True)
    await c.stop()


def main() -> int:
    kind, bootstrap, group, topic, outfile, session = sys.argv[1:7]
    instance = sys.argv[7] if len(sys.argv) > 7 else None
    signal.signal(signal.SIGTERM, _stop)
    out = Out(outfile)
    started = time.monotonic()
    if kind == "confluent":
        run_confluent(bootstrap, group, topic, out, int(session), instance)
    elif kind == "kafka-python":
        run_kafka_python(bootstrap, group, topic, out, int(session))
    elif kind == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, group, topic, out, int(session)))
    else:
        raise SystemExit(f"unknown client kind {kind!r}")
    print(f"stopped after {time.monotonic() - started:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
