"""A broker with thousands of partitions restarts quickly (issue 20): its logs load without rewriting a
producer-state snapshot, their states are read from ZooKeeper in bulk, and the controller leaves every
partition with its leader (no move away and back, which cost two ZooKeeper writes per partition)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ferry.broker.log.producer_state import SNAPSHOT_FILE
from ferry.client.message_set_producer import MessageSetProducer
from ferry.client.wire_client import WireClient
from ferry.embedded import BrokerProcess
from ferry.wire.record.message_set_builder import MessageSetBuilder
from ferry.zk.cluster_registry import ClusterRegistry

TOPICS = {"many-a": 1000, "many-b": 1000}
# Measured on the 2-core VM under a load average of 15-30 (five engineers' tests at once): 2,000 partitions served
# again 7.8 s after the restarted process started, with 3.4 s of broker CPU; before this change 49.6 s and 8.3 s
# (bench/RESULTS.md). CPU time is the robust budget on a busy machine; the wall-time one is generous.
SERVE_BUDGET_S = 40.0
CPU_BUDGET_S = 6.5


def _cpu_seconds(pid: int) -> float:
    """user + system CPU time of a process (robust on a busy machine, unlike wall time)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_served(bootstrap: str, timeout_s: float) -> float:
    """Seconds until Metadata names this broker leader of every partition of TOPICS."""
    t0 = time.monotonic()
    client = WireClient(bootstrap, client_id="scale-start", timeout_s=30)
    try:
        while True:
            md = client.refresh_metadata(list(TOPICS))
            if all(t in md.topics and md.topics[t].error_code == 0
                   and sum(1 for p in md.topics[t].partitions if p.leader >= 0) == n for t, n in TOPICS.items()):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                led = {t: sum(1 for p in md.topics[t].partitions if p.leader >= 0) for t in TOPICS if t in md.topics}
                raise AssertionError(f"not every partition led after {timeout_s:.0f} s: {led}")
            time.sleep(0.2)
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_restarted_broker_serves_thousands_of_partitions_within_seconds(cluster_factory) -> None:
    cluster = cluster_factory(1)
    broker = cluster.brokers[1]
    with ClusterRegistry(cluster.zk_connect) as reg:
        for name, n in TOPICS.items():
            reg.create_topic_with_assignment(name, {p: [1] for p in range(n)})
    _wait_served(broker.bootstrap, 240)
    one_set = MessageSetBuilder(100).build([b"x" * 100] * 5)
    producer = MessageSetProducer(broker.bootstrap, acks=1, max_in_flight=128, client_id="scale-start")
    for name, n in TOPICS.items():
        for p in range(n):
            producer.send(name, p, one_set)
    producer.flush()
    producer.close()
    with ClusterRegistry(cluster.zk_connect) as reg:
        epochs = {name: {p: st.leader_epoch for p, st in reg.partition_states(name).items()} for name in TOPICS}

    broker.stop(timeout=120)
    snapshots = {p: p.stat().st_mtime_ns for p in broker.data_dir.glob(f"*/{SNAPSHOT_FILE}")}
    assert len(snapshots) == sum(TOPICS.values())  # a clean stop wrote every log's producer state
    again = BrokerProcess(1, broker.data_dir, cluster.zk_connect, cluster.datacenter, port=broker.port)
    cluster.brokers[1] = again
    t0 = time.monotonic()
    again.start(timeout=SERVE_BUDGET_S)
    served = time.monotonic() - t0 + _wait_served(again.bootstrap, SERVE_BUDGET_S)
    assert again.pid is not None
    cpu = _cpu_seconds(again.pid)
    text = again.log_file.read_text(errors="replace")
    start = text.rfind("starting: data dir")
    print(f"served {served:.1f} s after the restart, broker CPU {cpu:.1f} s")
    assert served < SERVE_BUDGET_S and cpu < CPU_BUDGET_S, (served, cpu, text[start:][-3000:])

    with ClusterRegistry(cluster.zk_connect) as reg:
        after = {name: {p: st.leader_epoch for p, st in reg.partition_states(name).items()} for name in TOPICS}
    assert after == epochs  # nobody moved a leadership away and back: no state was rewritten
    time.sleep(1.0)  # the checkpoint at load (and any right after) rewrote no snapshot
    assert {p: p.stat().st_mtime_ns for p in broker.data_dir.glob(f"*/{SNAPSHOT_FILE}")} == snapshots
    # a line per topic, not one per partition, about what the broker leads
    assert text[start:].count(": leader (epoch") < 100
    producer = MessageSetProducer(again.bootstrap, acks=1, client_id="scale-start")
    for name, n in TOPICS.items():
        producer.send(name, n - 1, one_set)
    producer.flush()
    assert {producer.last_offsets[(name, n - 1)] for name, n in TOPICS.items()} == {5}
    producer.close()
