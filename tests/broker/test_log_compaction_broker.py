"""Compaction in running brokers with real clients (confluent-kafka): a key-heavy topic cleans to the latest
value per key plus live tombstones, consumers reading meanwhile never see an offset go back, kill -9 in the
middle of a swap loses nothing and the next clean finishes, a follower's log converges, keyless records are
refused."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from ferry.broker.log.log_compaction import SWAP_DELAY_ENV
from ferry.zk import ClusterRegistry
from tests.wire.storage_batches import decode

BROKER_ARGS = ("--flush-ms", "50", "--retention-check-interval-ms", "300",
               "--override", "log.cleaner.backoff.ms=200")
# segment.ms rolls the active segment once producing stops, so the whole load becomes cleanable
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "262144", "segment.ms": "1500",
                "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "3600000"}


def produce_keyed(bootstrap: str, topic: str, n: int, keys: int, tombstones: int = 0
                  ) -> dict[bytes, bytes | None]:
    """``n`` records over ``keys`` keys, then tombstones for the first ``tombstones`` keys; the latest per key."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 2000,
                  "compression.type": "lz4", "queue.buffering.max.messages": 200_000})
    latest: dict[bytes, bytes | None] = {}
    for i in range(n):
        key, value = f"key-{i % keys}".encode(), f"value-{i}".encode()
        for _ in range(100):
            try:
                p.produce(topic, value, key=key)
                break
            except BufferError:
                p.poll(0.1)
        latest[key] = value
        if i % 50_000 == 0:
            p.poll(0)
    for k in range(tombstones):
        key = f"key-{k}".encode()
        p.produce(topic, None, key=key)
        latest[key] = None
    assert p.flush(120) == 0
    return latest


def read_from_zero(bootstrap: str, topic: str, timeout: float = 60.0, isolation: str = "read_committed"
                   ) -> list[tuple[int, bytes, bytes | None]]:
    """Every record from offset 0 to the high watermark, as a consumer sees them; offsets must only grow."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": isolation})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= high:
                        return out
                    continue
                raise AssertionError(m.error())
            assert not out or m.offset() > out[-1][0], f"offset {m.offset()} after {out[-1][0]}"
            out.append((m.offset(), m.key(), m.value()))
        raise AssertionError(f"did not reach the high watermark {high} in {timeout} s ({len(out)} records)")
    finally:
        c.close()


def wait_cleaned(bootstrap: str, topic: str, want: int, timeout: float = 120.0) -> list:
    """Read from zero until exactly ``want`` records remain (the cleaner got to everything)."""
    deadline = time.monotonic() + timeout
    records: list = []
    while time.monotonic() < deadline:
        records = read_from_zero(bootstrap, topic)
        if len(records) == want:
            return records
        time.sleep(1)
    raise AssertionError(f"{topic} still holds {len(records)} records, not {want}")


def check_latest(records: list, latest: dict[bytes, bytes | None]) -> None:
    assert {k: v for _, k, v in records} == latest
    assert len(records) == len(latest)


def run_key_heavy(cluster_factory, n: int, keys: int, tombstones: int) -> None:
    cluster = cluster_factory(1, extra_args=BROKER_ARGS)
    with ClusterRegistry(cluster.zk_connect) as reg:
        reg.create_topic("profiles", 1, dict(TOPIC_CONFIG))
    errors: list[BaseException] = []
    passes = [0]
    stop = threading.Event()

    def reader() -> None:  # consumers reading while the cleaner works: read_from_zero asserts offsets grow
        try:
            while not stop.is_set():
                read_from_zero(cluster.bootstrap, "profiles", timeout=120)
                passes[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    latest = produce_keyed(cluster.bootstrap, "profiles", n, keys, tombstones)
    t = threading.Thread(target=reader)
    t.start()
    try:
        records = wait_cleaned(cluster.bootstrap, "profiles", keys, timeout=300)
    finally:
        stop.set()
        t.join(timeout=180)
    assert not errors, errors[0]
    assert passes[0] >= 1
    check_latest(records, latest)
    assert sum(v is None for _, _, v in records) == tombstones  # unexpired tombstones are still there
    assert records[-1][0] == n + tombstones - 1  # the offsets are the originals
    assert read_with_kafka_python(cluster.bootstrap, "profiles", records[-1][0] + 1) == records  # holes too


def read_with_kafka_python(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    """kafka-python's consumer from offset 0 up to ``end`` (another client's reading of the holes)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000)
    try:
        tp = KTopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        out = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out or out[-1][0] < end - 1):
            for records in c.poll(timeout_ms=1000).values():
                out.extend((r.offset, r.key, r.value) for r in records)
        return out
    finally:
        c.close()


def test_key_heavy_topic_cleans_to_the_latest_per_key_while_consumers_read(cluster_factory) -> None:
    run_key_heavy(cluster_factory, 100_000, 1_000, 100)


@pytest.mark.slow
def test_a_million_records_over_ten_thousand_keys(cluster_factory) -> None:
    run_key_heavy(cluster_factory, 1_000_000, 10_000, 500)


def test_kill_9_mid_swap_loses_nothing_and_the_next_clean_finishes(cluster_factory, monkeypatch) -> None:
    monkeypatch.setenv(SWAP_DELAY_ENV, "60")
    cluster = cluster_factory(1, extra_args=BROKER_ARGS)
    broker = next(iter(cluster.brokers.values()))
    with ClusterRegistry(cluster.zk_connect) as reg:
        reg.create_topic("state", 1, dict(TOPIC_CONFIG))
    latest = produce_keyed(cluster.bootstrap, "state", 30_000, 500, 20)
    log_dir = broker.data_dir / "state-0"
    deadline = time.monotonic() + 60
    while not any(p.name.endswith(".log.swap") for p in log_dir.iterdir()):
        assert time.monotonic() < deadline, "the cleaner never reached a swap"
        time.sleep(0.05)
    broker.kill()
    monkeypatch.delenv(SWAP_DELAY_ENV)
    broker.start()
    records = wait_cleaned(cluster.bootstrap, "state", 500)
    check_latest(records, latest)
    names = [p.name for p in log_dir.iterdir()]
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".swap-end"))], names


@pytest.mark.slow  # ~20 s; the log-level replica test (test_log_compaction.py) runs in the fast tier
def test_a_follower_cleans_its_own_copy_and_converges(cluster_factory) -> None:
    cluster = cluster_factory(2, extra_args=BROKER_ARGS)
    with ClusterRegistry(cluster.zk_connect) as reg:
        reg.create_topic("replicated", 1, dict(TOPIC_CONFIG), replication_factor=2)
    latest = produce_keyed(cluster.bootstrap, "replicated", 40_000, 300, 30)
    wait_cleaned(cluster.bootstrap, "replicated", 300)
    more = produce_keyed(cluster.bootstrap, "replicated", 300, 300)  # fetched by the follower after the holes
    latest.update(more)
    records = wait_cleaned(cluster.bootstrap, "replicated", 300)
    check_latest(records, latest)
    deadline = time.monotonic() + 120
    copies: list[dict] = []
    while time.monotonic() < deadline:
        copies = [records_on_disk(b.data_dir / "replicated-0") for b in cluster.brokers.values()]
        if all(len(c) == 300 for c in copies):
            break
        time.sleep(1)
    for copy in copies:
        assert {k: v for _, (k, v) in copy.items()} == latest
    assert copies[0] == copies[1]  # the same records at the same offsets on both replicas


def records_on_disk(partition_dir: Path) -> dict[int, tuple[bytes, bytes | None]]:
    """offset -> (key, value) of the newest record per key in a replica's segment files (read-only)."""
    newest: dict[bytes, tuple[int, bytes | None]] = {}
    for path in sorted(partition_dir.glob("*.log")):
        for batch, records in decode(path.read_bytes()):
            if not batch.is_control_batch:
                for r in records:
                    newest[r.key] = (r.offset, r.value)
    count = sum(len(records) for path in sorted(partition_dir.glob("*.log"))
                for batch, records in decode(path.read_bytes()) if not batch.is_control_batch)
    if count != len(newest):
        return {}
    return {off: (k, v) for k, (off, v) in newest.items()}


def test_a_record_without_a_key_is_refused_on_a_compacted_topic(cluster_factory) -> None:
    cluster = cluster_factory(1, extra_args=BROKER_ARGS)
    with ClusterRegistry(cluster.zk_connect) as reg:
        reg.create_topic("keyed", 1, dict(TOPIC_CONFIG))
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "retries": 0})
    reports: list = []
    p.produce("keyed", b"no key", on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(30) == 0  # its own batch: Kafka refuses a batch holding one keyless record whole
    p.produce("keyed", b"with key", key=b"k", on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(30) == 0
    assert reports[0] is not None and reports[0].code() == KafkaError.INVALID_RECORD, reports
    assert reports[1] is None
    assert [(k, v) for _, k, v in read_from_zero(cluster.bootstrap, "keyed")] == [(b"k", b"with key")]


def test_admin_client_switches_compaction_on_live(cluster_factory) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    cluster = cluster_factory(1, extra_args=BROKER_ARGS)
    with ClusterRegistry(cluster.zk_connect) as reg:
        reg.create_topic("switch", 1, {k: v for k, v in TOPIC_CONFIG.items() if k != "cleanup.policy"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    latest = produce_keyed(cluster.bootstrap, "switch", 3_000, 10)

    def policy() -> str:
        (_, fut), = admin.describe_configs([ConfigResource("topic", "switch")], request_timeout=60).items()
        return fut.result(90)["cleanup.policy"].value

    def alter(op: AlterConfigOpType, value: str) -> None:
        res = ConfigResource("topic", "switch", incremental_configs=[
            ConfigEntry("cleanup.policy", value, incremental_operation=op)])
        for fut in admin.incremental_alter_configs([res], request_timeout=60).values():
            fut.result(90)

    assert policy() == "delete"
    time.sleep(3)  # segment.ms passes: a delete-policy topic keeps everything (no retention yet)
    assert len(read_from_zero(cluster.bootstrap, "switch")) == 3_000
    alter(AlterConfigOpType.APPEND, "compact")  # Kafka's list operation, in its order: delete -> delete,compact
    assert policy() == "delete,compact"
    check_latest(wait_cleaned(cluster.bootstrap, "switch", 10), latest)
    alter(AlterConfigOpType.SUBTRACT, "delete")
    assert policy() == "compact"


def test_aborted_transactions_are_cleaned_away(cluster_factory) -> None:
    cluster = cluster_factory(1, extra_args=BROKER_ARGS)
    with ClusterRegistry(cluster.zk_connect) as reg:
        reg.create_topic("txn-state", 1, dict(TOPIC_CONFIG))
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "compact-tx", "linger.ms": 5})
    p.init_transactions(60)
    latest: dict[bytes, bytes | None] = {}
    for t in range(20):
        p.begin_transaction()
        values = {f"k{i}".encode(): f"t{t}-{i}".encode() for i in range(50)}
        for key, value in values.items():
            p.produce("txn-state", value, key=key)
        if t % 3 == 2:
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
            latest.update(values)
    records = wait_cleaned(cluster.bootstrap, "txn-state", 50)
    check_latest(records, latest)
    # read_uncommitted sees the same: the aborted records are gone from the log, not just filtered
    check_latest(read_from_zero(cluster.bootstrap, "txn-state", isolation="read_uncommitted"), latest)
