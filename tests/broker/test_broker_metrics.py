"""Kafka's broker metrics on a real broker's /metrics, with real clients (confluent-kafka) producing and fetching:
RequestMetrics' phases per API adding up to the total, remote time on acks=all produce and long-poll fetch,
per-topic bytes/messages in equal to what the log holds (the native fast path and the general path both count),
partition gauges, log flush times, queues and memory pool, process metrics; the Grafana dashboard's metric
names all served. The ISR shrink counter under a killed follower: a 3-broker cluster (slow)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

import pytest
from broker_wire import WireClient, build_batch, fetch, list_offsets
from broker_wire import produce as wire_produce
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from replication_helpers import FAST, ReplicatedCluster

from ferry.wire.bucket_histogram import BucketHistogram
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Writer

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "infra" / "ansible" / "roles" / "prometheus" / "files" / "ferry-brokers.grafana.json"
PHASES = ("ferry_request_queue_time_seconds", "ferry_request_local_time_seconds",
          "ferry_request_remote_time_seconds", "ferry_response_queue_time_seconds",
          "ferry_response_send_time_seconds")


def scrape(port: int) -> list:
    """The samples of a broker's /metrics (its HTTP server comes up a moment after the Kafka port: waited for)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            break
        except urllib.error.URLError:
            assert time.monotonic() < deadline, f"no /metrics on port {port} within 30 s"
            time.sleep(0.2)
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def value(samples: list, name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


def wait_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def log_bytes(cluster: ReplicatedCluster, topic: str, partitions: int) -> int:
    """The record batch bytes the broker holds for a topic: what its segment files hold."""
    return sum(f.stat().st_size for p in range(partitions)
               for f in cluster.log_dir(1, topic, p).glob("*.log"))


@pytest.fixture(scope="module")
def one(zk_server, tmp_path_factory):
    """One broker with metrics and a bounded memory pool (queued.max.request.bytes)."""
    c = ReplicatedCluster(zk_server.connect, tmp_path_factory.mktemp("metrics"), 1,
                          ("--override", "queued.max.request.bytes=67108864"), metrics=True)
    yield c
    c.stop()


def produce(bootstrap: str, topic: str, n: int, partitions: int = 1, **conf: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "none", **conf})
    errors: list = []
    for i in range(n):
        p.produce(topic, f"value-{i:05d}".encode() * 4, partition=i % partitions,
                  on_delivery=lambda err, _msg: errors.append(err) if err else None)
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors


def consume_all(bootstrap: str, topic: str, n: int, partitions: int = 1) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 300})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, deadline = 0, time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            assert m.error() is None, m.error()
            got += 1
    c.close()
    assert got == n


@pytest.fixture(scope="module")
def traffic(one):
    """Produce (acks=1: the fast path; two partitions per request: the general path), fetch it all back."""
    one.registry.create_topic_with_assignment("fast", {0: [1]})
    one.registry.create_topic_with_assignment("general", {0: [1], 1: [1]})
    one.wait_isr("fast", 1, 1)
    one.wait_isr("general", 2, 1)
    produce(one.brokers[1].bootstrap, "fast", 1000, acks="1")
    produce(one.brokers[1].bootstrap, "general", 1000, partitions=2, acks="1", **{"linger.ms": "50"})
    consume_all(one.brokers[1].bootstrap, "fast", 1000)
    consume_all(one.brokers[1].bootstrap, "general", 1000, partitions=2)
    return one


def test_request_phases_add_up_to_the_total_per_api(traffic):
    s = scrape(traffic.metrics_ports[1])
    for api in ("Produce", "Fetch", "Metadata", "ApiVersions"):
        count = value(s, "ferry_request_total_time_seconds_count", api=api)
        total = value(s, "ferry_request_total_time_seconds_sum", api=api)
        assert count >= 1, api
        assert total > 0, api
        for phase in PHASES:
            assert value(s, f"{phase}_count", api=api) == count, (api, phase)
        parts = sum(value(s, f"{phase}_sum", api=api) for phase in PHASES)
        assert parts == pytest.approx(total, rel=1e-6, abs=1e-6), api
        # cumulative buckets: +Inf holds them all
        assert value(s, "ferry_request_total_time_seconds_bucket", api=api, le="+Inf") == count
    # every produced request was timed: the counter of requests and the histogram agree
    assert value(s, "ferry_request_total_time_seconds_count", api="Produce") == \
        value(s, "ferry_broker_requests_total", api="Produce")
    assert value(s, "ferry_request_total_time_seconds_count", api="FetchFollower") == 0  # no followers here
    # acks=1: no Produce waited for anything remote
    assert value(s, "ferry_request_remote_time_seconds_sum", api="Produce") == 0


def test_per_topic_bytes_and_messages_equal_what_was_produced(traffic):
    s = scrape(traffic.metrics_ports[1])
    assert value(s, "ferry_native_enabled", part="produce") == 1  # the native fast path served "fast"
    for topic, partitions in (("fast", 1), ("general", 2)):
        assert value(s, "ferry_broker_topic_messages_in_total", topic=topic) == 1000, topic
        on_disk = log_bytes(traffic, topic, partitions)
        assert value(s, "ferry_broker_topic_bytes_in_total", topic=topic) == on_disk, topic
        out = value(s, "ferry_broker_topic_bytes_out_total", topic=topic)
        assert on_disk <= out < 2 * on_disk, topic  # everything fetched once (a batch may be fetched again)


def test_acks_all_produce_and_long_poll_fetch_show_remote_time(traffic):
    port = traffic.metrics_ports[1]
    before = scrape(port)
    produce(traffic.brokers[1].bootstrap, "fast", 20, acks="all", **{"linger.ms": "0", "max.in.flight": "1"})
    after = scrape(port)
    more = value(after, "ferry_request_remote_time_seconds_count", api="Produce") - \
        value(before, "ferry_request_remote_time_seconds_count", api="Produce")
    waited = value(after, "ferry_request_remote_time_seconds_sum", api="Produce") - \
        value(before, "ferry_request_remote_time_seconds_sum", api="Produce")
    assert more >= 1 and waited > 0  # waited for the fsync (the ISR is the leader alone)
    assert value(after, "ferry_log_flush_time_seconds_count") > value(before, "ferry_log_flush_time_seconds_count")
    # a consumer at the end: its fetches park in the purgatory for fetch.wait.max.ms (300 ms)
    before = after
    c = Consumer({"bootstrap.servers": traffic.brokers[1].bootstrap, "group.id": "idle", "fetch.wait.max.ms": 300})
    c.assign([TopicPartition("fast", 0, 1020)])
    end = time.monotonic() + 2.5
    while time.monotonic() < end:
        assert c.poll(0.2) is None
    c.close()
    after = scrape(port)
    waited = value(after, "ferry_request_remote_time_seconds_sum", api="Fetch") - \
        value(before, "ferry_request_remote_time_seconds_sum", api="Fetch")
    assert waited > 0.5


def errors_answered(before: list, after: list, api: str, error: str) -> float:
    """How many more times ``api`` answered ``error`` in the ``after`` scrape than in ``before``."""
    return value(after, "ferry_broker_response_errors_total", api=api, error=error) - \
        value(before, "ferry_broker_response_errors_total", api=api, error=error)


def test_error_codes_answered_are_counted_per_api_and_code(traffic):
    port = traffic.metrics_ports[1]
    before = scrape(port)
    with WireClient(traffic.brokers[1].bootstrap) as c:
        for _ in range(3):  # a partition the topic does not have
            assert wire_produce(c, "fast", 7, build_batch([b"x"]), acks=1).error == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert fetch(c, "fast", 0, 10**9).error == 1  # OFFSET_OUT_OF_RANGE
        assert list_offsets(c, "fast", 9, -1)[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    after = scrape(port)
    more = partial(errors_answered, before, after)
    assert more("Produce", "UNKNOWN_TOPIC_OR_PARTITION") == 3
    assert more("Fetch", "OFFSET_OUT_OF_RANGE") == 1
    assert more("ListOffsets", "UNKNOWN_TOPIC_OR_PARTITION") == 1


def test_error_codes_of_every_api_are_counted(traffic):
    """Kafka's ErrorsPerSec{request,error} for the other APIs too (admin answers waiting on ZooKeeper, group
    answers), from a real AdminClient and consumer: each error answered once is counted once."""
    port = traffic.metrics_ports[1]
    bootstrap = traffic.brokers[1].bootstrap
    before = scrape(port)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic("fast", 1, 1)])["fast"].result(30)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        admin.delete_topics(["no-such-topic"], operation_timeout=10)["no-such-topic"].result(30)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        r = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")
        admin.describe_configs([r])[r].result(30)
    with pytest.raises(KafkaException, match="INVALID_PARTITIONS"):
        admin.create_partitions([NewPartitions("fast", 1)])["fast"].result(30)
    with WireClient(bootstrap) as c:  # a heartbeat of a member the group does not know (Heartbeat v0)
        heartbeat = c.request(12, 0, Writer().string("g-nobody").int32(1).string("m-nobody").getvalue()).int16()
    assert heartbeat != 0
    after = scrape(port)
    more = partial(errors_answered, before, after)
    assert more("CreateTopics", "TOPIC_ALREADY_EXISTS") == 1
    assert more("DeleteTopics", "UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert more("DescribeConfigs", "UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert more("CreatePartitions", "INVALID_PARTITIONS") == 1
    assert more("Heartbeat", ErrorCode(heartbeat).name) == 1
    assert more("CreateTopics", "NONE") == 0  # error-free answers are not counted


def test_partition_gauges_queues_memory_pool_and_process_metrics(traffic):
    s = scrape(traffic.metrics_ports[1])
    assert value(s, "ferry_broker_partitions") >= 3  # fast, general x2 (and _audit's)
    assert value(s, "ferry_broker_leader_partitions") == value(s, "ferry_broker_partitions")
    assert value(s, "ferry_broker_under_replicated_partitions") == 0
    assert value(s, "ferry_broker_under_min_isr_partitions") == 0
    assert value(s, "ferry_broker_offline_partitions") == 0
    assert value(s, "ferry_controller_offline_partitions") == 0  # the only broker is the controller
    assert value(s, "ferry_log_flush_time_seconds_count") >= 1
    assert value(s, "ferry_broker_memory_pool_available_bytes", listener="PLAINTEXT") == 67108864  # idle
    assert value(s, "ferry_broker_memory_pool_used_bytes", listener="PLAINTEXT") == 0
    assert any(x.name == "ferry_broker_request_queue_size" for x in s)
    # a connection waiting with a request unanswered: a fetch parked in the purgatory
    c = Consumer({"bootstrap.servers": traffic.brokers[1].bootstrap, "group.id": "q", "fetch.wait.max.ms": 2000})
    c.assign([TopicPartition("fast", 0, 1020)])
    try:
        def parked() -> bool:
            c.poll(0.05)
            return value(scrape(traffic.metrics_ports[1]), "ferry_broker_request_queue_size") >= 1
        wait_until(parked, 20, "a parked fetch counted in the request queue")
        assert value(scrape(traffic.metrics_ports[1]), "ferry_broker_connections", listener="PLAINTEXT") >= 1
    finally:
        c.close()
    assert value(s, "process_cpu_seconds_total") > 0
    assert value(s, "process_resident_memory_bytes") > 10_000_000
    assert value(s, "process_open_fds") > 5
    assert value(s, "process_max_fds") > 0


def test_bucket_histogram_is_cumulative_with_inclusive_bounds():
    h = BucketHistogram((0.001, 0.01))
    for v in (0.0, 0.001, 0.0011, 0.01, 0.5, 7.0):
        h.observe(v)
    assert h.cumulative() == [("0.001", 2), ("0.01", 4), ("+Inf", 6)]  # le: a value equal to a bound is in it
    assert h.sum == pytest.approx(7.5121)


def dashboard_metrics(prefix: str = "") -> set[str]:
    """The metric names the Grafana dashboard's queries read (those starting with ``prefix``); without one, less
    the mirror links' (ferry_mirror_link_*: served while a link runs, tests/mirror/test_embedded_mirror.py)."""
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in board["panels"] for t in panel.get("targets", [])]
    assert len(exprs) >= 15
    names = set()
    for expr in exprs:
        names |= set(re.findall(r"\b((?:ferry|process)_[a-z_]+)\b", expr))
    if prefix:
        return {n for n in names if n.startswith(prefix)}
    return {n for n in names if not n.startswith("ferry_mirror_link_")}


def test_every_metric_of_the_grafana_dashboard_is_served(traffic):
    # a request of an unknown API: the connection is closed and the failure counted (the errors panel's series)
    host, port = traffic.brokers[1].bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        body = struct.pack(">hhih", 99, 0, 7, -1)
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert sock.recv(10) == b""
    wait_until(lambda: value(scrape(traffic.metrics_ports[1]), "ferry_broker_request_errors_total") >= 1, 10,
               "the failed request counted")
    with WireClient(traffic.brokers[1].bootstrap) as c:  # an error code answered (the same panel's other series)
        assert list_offsets(c, "fast", 9, -1)[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    served = {s.name for s in scrape(traffic.metrics_ports[1])}
    names = dashboard_metrics()
    assert {"ferry_request_total_time_seconds_bucket", "ferry_broker_topic_bytes_in_total",
            "ferry_broker_under_min_isr_partitions", "process_open_fds"} <= names
    assert names <= served, sorted(names - served)


def test_names_follow_prometheus_conventions(traffic):
    """`promtool check metrics` (Debian's prometheus package) over a live broker's whole /metrics, every
    family with samples: units in the names, _total on counters, no _count on gauges."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: Debian's prometheus package (scripts/setup.sh)"
    scrape(traffic.metrics_ports[1])  # up
    text = urllib.request.urlopen(f"http://127.0.0.1:{traffic.metrics_ports[1]}/metrics", timeout=10).read()
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def metric_of(cluster: ReplicatedCluster, broker_id: int, name: str, **labels: str) -> float:
    return value(scrape(cluster.metrics_ports[broker_id]), name, **labels)


@pytest.mark.slow  # three brokers, a follower killed and the lag timeout waited out
def test_isr_shrink_expand_under_min_isr_and_offline_partitions_when_a_broker_is_killed_and_restarted(zk_server, tmp_path):
    c = ReplicatedCluster(zk_server.connect, tmp_path, 3, FAST, metrics=True)
    try:
        c.registry.create_topic_with_assignment("isr", {0: [1, 2, 3]}, {"min.insync.replicas": "3"})
        c.wait_isr("isr", 1, 3)
        leader = c.state("isr", 0).leader
        follower = next(b for b in (1, 2, 3) if b != leader)
        c.registry.create_topic_with_assignment("alone", {0: [follower]})  # offline once its only replica dies
        c.wait_isr("alone", 1, 1)
        wait_until(lambda: metric_of(c, leader, "ferry_broker_leader_partitions") >= 1, 30, "the leader's gauge")
        # the followers' fetches are timed apart from consumers' (Kafka's FetchFollower): long polls, remote time
        wait_until(lambda: metric_of(c, leader, "ferry_request_remote_time_seconds_sum", api="FetchFollower") > 0,
                   30, "followers' fetches timed as FetchFollower")
        assert metric_of(c, leader, "ferry_request_total_time_seconds_count", api="Fetch") == 0  # no consumer
        shrinks = metric_of(c, leader, "ferry_broker_isr_shrinks_total")
        assert metric_of(c, leader, "ferry_broker_under_min_isr_partitions") == 0
        c.kill(follower)
        c.wait_state("isr", 0, lambda st: follower not in st.isr, 30, "ISR without the killed follower")
        wait_until(lambda: metric_of(c, leader, "ferry_broker_isr_shrinks_total") >= shrinks + 1, 15, "shrink counted")
        assert metric_of(c, leader, "ferry_broker_under_replicated_partitions") >= 1
        assert metric_of(c, leader, "ferry_broker_under_min_isr_partitions") >= 1
        alive = [b for b in (1, 2, 3) if b != follower]  # the controller is one of them (re-elected if need be)
        wait_until(lambda: sum(metric_of(c, b, "ferry_controller_offline_partitions") for b in alive) >= 1, 30,
                   "the offline partition counted by the controller")
        # the follower back: it catches up, the leader adds it to the ISR again and counts the expand
        expands = metric_of(c, leader, "ferry_broker_isr_expands_total")
        c.restart(follower)
        c.wait_state("isr", 0, lambda st: follower in st.isr, 60, "ISR with the restarted follower")
        wait_until(lambda: metric_of(c, leader, "ferry_broker_isr_expands_total") >= expands + 1, 15,
                   "expand counted")
        wait_until(lambda: metric_of(c, leader, "ferry_broker_under_min_isr_partitions") == 0, 15,
                   "under-min-ISR cleared")
    finally:
        c.stop()
