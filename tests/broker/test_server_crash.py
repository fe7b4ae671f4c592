"""kill -9 a broker while a producer with acks=all is writing: after a restart every acknowledged message
is there, at the offset it was acknowledged with."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import WireClient, create_topic, decode_values, fetch, leaders, start_brokers  # noqa: E402

PARTITIONS = 3


def _read_all(addr: str, topic: str, partition: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    with WireClient(addr) as c:
        offset = 0
        while True:
            f = fetch(c, topic, partition, offset)
            assert f.error == 0, f
            vals = [(o, v) for o, v in decode_values(f.records) if o >= offset]
            if not vals:
                return out
            out.update(vals)
            offset = vals[-1][0] + 1


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_kill_9_during_acks_all_production_loses_nothing_acknowledged(zk_server, tmp_path):
    # Background flushing effectively off: only the acks=-1 path fsyncs before answering.
    _zk, (broker,) = start_brokers(zk_server.connect, tmp_path, 1, extra_args=(
        "--zk-session-timeout-ms", "4000", "--flush-ms", "600000", "--flush-messages", "100000000"))
    try:
        topic = "crash"
        with WireClient(broker.bootstrap) as c:
            assert create_topic(c, topic, PARTITIONS)[0] == 0
            leaders(c, topic, PARTITIONS)

        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2,
                             "message.timeout.ms": 3000, "compression.type": "lz4"})
        acked: list[tuple[int, int, bytes]] = []
        failed: list = []
        lock = threading.Lock()

        def on_delivery(err, msg):
            with lock:
                if err is None:
                    acked.append((msg.partition(), msg.offset(), msg.value()))
                else:
                    failed.append(err)

        stop = threading.Event()

        def produce_forever():
            i = 0
            while not stop.is_set() and i < 2_000_000:
                try:
                    producer.produce(topic, value=b"m-%08d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
                    i += 1
                except BufferError:
                    producer.poll(0.01)
                if i % 200 == 0:
                    producer.poll(0)

        t = threading.Thread(target=produce_forever, daemon=True)
        t.start()
        deadline = time.monotonic() + 20
        while len(acked) < 3000 and time.monotonic() < deadline:
            time.sleep(0.05)
        broker.kill()  # SIGKILL mid-stream
        time.sleep(0.3)
        stop.set()
        t.join(timeout=10)
        producer.flush(10)  # everything still queued fails (message.timeout.ms): not acknowledged
        with lock:
            acknowledged = list(acked)
        assert len(acknowledged) >= 3000

        broker.start()  # same id, port and data dir; recovery runs before it listens
        for p in range(PARTITIONS):
            on_disk = _read_all(broker.bootstrap, topic, p)
            mine = [(o, v) for part, o, v in acknowledged if part == p]
            missing = [(o, v) for o, v in mine if on_disk.get(o) != v]
            assert not missing, f"partition {p}: {len(missing)} acknowledged messages lost, e.g. {missing[:3]}"
            # offsets are dense and every stored message is one we produced, once
            assert sorted(on_disk) == list(range(len(on_disk)))
            assert len(set(on_disk.values())) == len(on_disk)
    finally:
        broker.stop()
