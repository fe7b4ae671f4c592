"""Client quotas (docs/quotas.md): the windowed rate and Kafka's precedence of quota entries; the store in
ZooKeeper in Kafka's layout, watched live; DescribeClientQuotas/AlterClientQuotas through kafka-python's own
protocol classes; throttle_time_ms reaching librdkafka's throttle callback."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
import uuid

import pytest
from acl_helpers import AUTHORIZER_ARGS, binding, eventually, grant
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    ListGroupsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    ListOffsetsRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest

from ferry.broker.server.channel_throttle import ChannelThrottle
from ferry.broker.server.client_quotas import PRODUCE, ClientQuotas, QuotaManager, WindowedRate
from ferry.broker.server.request_context import ANONYMOUS, Session
from ferry.cli import main as cli_main
from ferry.wire.protocol.acl_types import CLUSTER_NAME, AclOperation, ResourceType
from ferry.zk import client_quotas as store
from ferry.zk.client_quotas import DEFAULT, QuotaConfigCache, QuotaEntity, QuotaStoreError
from ferry.zk.kazoo_client import connect
from ferry.zk.scram_credentials import user_path
from tests.conftest import Cluster

# ---------------------------------------------------------------------------------------------- the rate


def test_throttle_is_the_time_the_excess_takes_to_drain():
    r = WindowedRate(11, 1.0)
    r.record(5000, 100.5)  # 5000 B within the first window, quota 1000 B/s: 4 s over
    assert r.throttle_s(1000, 100.5) == pytest.approx(4.0)
    assert WindowedRate().throttle_s(1000, 100.0) == 0.0
    r2 = WindowedRate(11, 1.0)
    r2.record(900, 100.2)
    assert r2.throttle_s(1000, 100.2) == 0.0  # within the quota


def test_windows_age_out():
    r = WindowedRate(11, 1.0)
    r.record(50_000, 100.0)
    assert r.throttle_s(1000, 100.0) > 0
    assert r.throttle_s(1000, 112.0) == 0.0  # 11 windows later the burst is forgotten
    assert r.measure(112.0)[0] == 0.0


def test_a_greedy_client_muted_for_its_throttle_is_held_to_its_quota():
    """A client that sends the moment its mute ends: its rate over any 10 s is within 2% of the quota."""
    quota, size = 1_000_000.0, 64 * 1024
    r, t, sent = WindowedRate(), 1000.0, []
    while t < 1060:
        r.record(size, t)
        sent.append(t)
        t += max(r.throttle_s(quota, t), 0.0005)
    for start in (1005.0, 1013.3, 1027.7, 1040.0):
        n = sum(1 for s in sent if start <= s < start + 10)
        assert n * size / 10 == pytest.approx(quota, rel=0.02)


# ---------------------------------------------------------------------------------------------- precedence

LEVELS = [  # Kafka's order, most specific first
    QuotaEntity("alice", "app"), QuotaEntity("alice", DEFAULT), QuotaEntity("alice", None),
    QuotaEntity(DEFAULT, "app"), QuotaEntity(DEFAULT, DEFAULT), QuotaEntity(DEFAULT, None),
    QuotaEntity(None, "app"), QuotaEntity(None, DEFAULT),
]


def test_precedence_is_kafkas():
    for i, winner in enumerate(LEVELS):
        m = QuotaManager(PRODUCE)
        m.update({e: {PRODUCE: float(100 + j)} for j, e in enumerate(LEVELS) if j >= i})
        assert m.quota_for("alice", "app")[0] == 100 + i, winner
    m = QuotaManager(PRODUCE)
    m.update({QuotaEntity(None, "other"): {PRODUCE: 5.0}})
    assert m.quota_for("alice", "app") is None


def test_who_shares_a_rate():
    """A user's quota is shared by its clients; a default gives every client id a rate of its own."""
    m = QuotaManager(PRODUCE)
    m.update({QuotaEntity("alice", None): {PRODUCE: 1000.0}, QuotaEntity(None, DEFAULT): {PRODUCE: 1000.0}})
    assert m.quota_for("alice", "a")[1] == m.quota_for("alice", "b")[1] == ("alice", "")
    assert m.quota_for("bob", "a")[1] == ("", "a") != m.quota_for("bob", "b")[1]
    assert m.record("bob", "a", 5000, 10.5) > 0
    assert m.record("bob", "b", 500, 10.5) == 0.0  # bob's other client is not held by the first one's bytes


def test_each_kind_is_looked_up_by_its_own_key():
    q = ClientQuotas()
    assert not q.active
    q.update({QuotaEntity(None, "app"): {"consumer_byte_rate": 10.0}})
    assert q.active and q.produce.quota_for("u", "app") is None and q.fetch.quota_for("u", "app")[0] == 10.0
    q.update({})
    assert not q.active


# ---------------------------------------------------------------------------------------------- the store


@pytest.fixture
def zk(zk_connect):
    client = connect(zk_connect)
    yield client
    client.stop()
    client.close()


def test_store_writes_kafkas_layout_and_notifies(zk):
    store.alter(zk, QuotaEntity(None, "app 1"), {"producer_byte_rate": 1024}, [])
    store.alter(zk, QuotaEntity("alice", DEFAULT), {"consumer_byte_rate": 2048.5, "request_percentage": 50}, [])
    doc = json.loads(zk.get("/config/clients/app%201")[0])
    assert doc == {"version": 1, "config": {"producer_byte_rate": "1024"}}
    doc = json.loads(zk.get("/config/users/alice/clients/<default>")[0])
    assert doc["config"] == {"consumer_byte_rate": "2048.5", "request_percentage": "50"}
    changes = sorted(zk.get_children("/config/changes"))
    assert len(changes) == 2 and all(c.startswith("config_change_") for c in changes)
    assert json.loads(zk.get(f"/config/changes/{changes[-1]}")[0]) == {
        "version": 2, "entity_path": "users/alice/clients/<default>"}
    assert store.read_all(zk) == {QuotaEntity(None, "app 1"): {"producer_byte_rate": 1024.0},
                                  QuotaEntity("alice", DEFAULT): {"consumer_byte_rate": 2048.5,
                                                                  "request_percentage": 50.0}}
    store.alter(zk, QuotaEntity(None, "app 1"), {}, ["producer_byte_rate"])
    assert zk.exists("/config/clients/app%201") is None


def test_store_keeps_a_users_scram_credentials(zk):
    zk.create(user_path("carol"), json.dumps({"version": 1, "config": {"SCRAM-SHA-256": "salt=x"}}).encode(),
              makepath=True)
    store.alter(zk, QuotaEntity("carol", None), {"producer_byte_rate": 100}, [])
    store.alter(zk, QuotaEntity("carol", None), {}, ["producer_byte_rate"])
    assert json.loads(zk.get(user_path("carol"))[0])["config"] == {"SCRAM-SHA-256": "salt=x"}


def test_store_refuses_what_is_not_a_quota(zk):
    with pytest.raises(QuotaStoreError, match="unknown quota key"):
        store.alter(zk, QuotaEntity(None, "x"), {"producer_bytes": 1}, [])
    with pytest.raises(QuotaStoreError, match="must be positive"):
        store.alter(zk, QuotaEntity(None, "x"), {"producer_byte_rate": 0}, [])
    with pytest.raises(QuotaStoreError, match="needs a user"):
        store.alter(zk, QuotaEntity(None, None), {"producer_byte_rate": 1}, [])
    assert zk.exists("/config/clients/x") is None


def test_cache_follows_changes_live(zk, zk_connect):
    seen = []
    cache = QuotaConfigCache(lambda: zk, seen.append)
    cache.start()
    try:
        store.alter(zk, QuotaEntity(None, DEFAULT), {"producer_byte_rate": 7}, [])
        deadline = time.monotonic() + 20
        while not seen or QuotaEntity(None, DEFAULT) not in seen[-1]:
            assert time.monotonic() < deadline, "the change was not seen"
            time.sleep(0.05)
        assert cache.quotas == {QuotaEntity(None, DEFAULT): {"producer_byte_rate": 7.0}}
    finally:
        cache.stop()


# ---------------------------------------------------------------------------------------------- the APIs


WINDOWS = 4  # quota.window.num of the module's broker (Kafka's default: 11): a throttle is at most 4 s


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("quotas"), f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/live", "live")
    c.add_broker(extra_args=("--override", f"quota.window.num={WINDOWS}", "--override", "quota.window.size.seconds=1"))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def admin(cluster):
    a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="quota-admin")
    yield a
    a.close()


def _send(admin, request):
    return admin._manager.run(admin._manager.send, request)


def _entity(user=None, client=None, default_user=False, default_client=False):
    E = AlterClientQuotasRequest.EntryData.EntityData
    out = []
    if user is not None or default_user:
        out.append(E(entity_type="user", entity_name=user))
    if client is not None or default_client:
        out.append(E(entity_type="client-id", entity_name=client))
    return out


def _alter(admin, version, entries, validate_only=False):
    D = AlterClientQuotasRequest.EntryData
    op_data = D.OpData
    req = AlterClientQuotasRequest(entries=[D(entity=e, ops=[op_data(key=k, value=v, remove=r) for k, v, r in ops])
                                            for e, ops in entries], validate_only=validate_only, version=version)
    return [(x.error_code, x.error_message, [(y.entity_type, y.entity_name) for y in x.entity])
            for x in _send(admin, req).entries]


def _describe(admin, version, components, strict=False):
    C = DescribeClientQuotasRequest.ComponentData
    resp = _send(admin, DescribeClientQuotasRequest(
        components=[C(entity_type=t, match_type=m, match=n) for t, m, n in components], strict=strict,
        version=version))
    entries = {tuple((e.entity_type, e.entity_name) for e in x.entity): {v.key: v.value for v in x.values}
               for x in resp.entries or []}
    return resp.error_code, resp.error_message, entries


@pytest.mark.parametrize("version", [0, 1])
def test_alter_and_describe_through_kafka_python(admin, version):
    app, user = f"app-{version}", f"u{version}"
    assert _alter(admin, version, [
        (_entity(client=app), [("producer_byte_rate", 1024.0, False), ("consumer_byte_rate", 4096.0, False)]),
        (_entity(user=user, client=app), [("request_percentage", 25.0, False)]),
        (_entity(default_client=True), [("producer_byte_rate", 1e6, False)]),
    ]) == [(0, None, [("client-id", app)]), (0, None, [("user", user), ("client-id", app)]),
           (0, None, [("client-id", None)])]
    code, _msg, found = _describe(admin, version, [("client-id", 0, app)])
    assert code == 0
    assert found[(("client-id", app),)] == {"producer_byte_rate": 1024.0, "consumer_byte_rate": 4096.0}
    assert found[(("user", user), ("client-id", app))] == {"request_percentage": 25.0}
    _code, _msg, strict = _describe(admin, version, [("client-id", 0, app)], strict=True)
    assert list(strict) == [(("client-id", app),)]
    _code, _msg, defaults = _describe(admin, version, [("client-id", 1, None)], strict=True)
    assert defaults == {(("client-id", None),): {"producer_byte_rate": 1e6}}
    assert _alter(admin, version, [(_entity(client=app), [("consumer_byte_rate", 0.0, True)])])[0][0] == 0
    _code, _msg, found = _describe(admin, version, [("client-id", 0, app)], strict=True)
    assert found == {(("client-id", app),): {"producer_byte_rate": 1024.0}}


def test_bad_alters_and_filters_are_invalid_requests(admin):
    results = _alter(admin, 1, [
        (_entity(client="ok"), [("producer_byte_rate", 10.0, False)]),
        (_entity(client="bad"), [("no_such_quota", 1.0, False)]),
        (_entity(client="neg"), [("producer_byte_rate", -5.0, False)]),
        ([], [("producer_byte_rate", 1.0, False)]),
    ], validate_only=True)
    assert [r[0] for r in results] == [0, 42, 42, 42]
    assert "unknown quota key 'no_such_quota'" in results[1][1] and "positive" in results[2][1]
    assert _describe(admin, 1, [("client-id", 0, "ok")])[2] == {}  # validate_only stored nothing
    code, msg, _ = _describe(admin, 1, [("group", 2, None)])
    assert code == 42 and "unknown entity type" in msg


def test_a_produce_over_its_quota_is_answered_with_throttle_time(cluster, admin):
    """librdkafka reads throttle_time_ms from the answer and reports it (throttle_cb); acks=all: the answer that
    waits for the flush carries it too."""
    assert _alter(admin, 1, [(_entity(client="slow-one"), [("producer_byte_rate", 20000.0, False)])])[0][0] == 0
    ca = AdminClient({"bootstrap.servers": cluster.bootstrap})
    ca.create_topics([NewTopic("quota-topic", 1, 1)])["quota-topic"].result(30)
    throttles = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "client.id": "slow-one", "linger.ms": 5, "acks": "all",
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    deadline = time.monotonic() + 30
    while not throttles or max(throttles) < 0.1:
        assert time.monotonic() < deadline, "no throttle reported"
        for _ in range(20):
            p.produce("quota-topic", b"x" * 1000)
        p.poll(0.2)
    p.purge()
    p.flush(10)
    assert max(throttles) > 0.1  # seconds: librdkafka's ThrottleEvent


def _throttle_of(bootstrap: str, client_id: str, request) -> int:
    """One request on a connection of its own (a throttled connection is muted for the client's throttle time;
    the answer itself goes out at once), encoded and its answer decoded by kafka-python's message classes."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as s:
        request.with_header(correlation_id=7, client_id=client_id)
        s.sendall(request.encode(header=True, framed=True))
        size = struct.unpack(">i", _recv(s, 4))[0]
        response = request.header.get_response_class().decode(_recv(s, size), header=True)
    assert response.header.correlation_id == 7
    return response.throttle_time_ms


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "the broker closed the connection"
        buf += chunk
    return buf


def test_every_answer_with_the_field_carries_the_throttle(cluster, admin):
    """A client over its request_percentage gets throttle_time_ms in every answer that has the field (KIP-219:
    Kafka sets it in all of them), in flexible and non-flexible versions and wherever the field sits; at most the
    windows' span (quota.window.num x quota.window.size.seconds). Another client id: 0 in the same answers."""
    assert _alter(admin, 1, [(_entity(client="busy"), [("request_percentage", 1e-6, False)])])[0][0] == 0
    ca = AdminClient({"bootstrap.servers": cluster.bootstrap})
    ca.create_topics([NewTopic("throttled", 1, 1)])["throttled"].result(30)
    LT, OD = ListOffsetsRequest.ListOffsetsTopic, OffsetDeleteRequest.OffsetDeleteRequestTopic
    requests = {
        "Metadata v1 (no field)": lambda: MetadataRequest(topics=None, version=1),
        "Metadata v8": lambda: MetadataRequest(topics=None, version=8),
        "Metadata v12 (flexible)": lambda: MetadataRequest(topics=None, version=12),
        "ListOffsets v7 (flexible)": lambda: ListOffsetsRequest(replica_id=-1, topics=[LT(name="throttled", partitions=[
            LT.ListOffsetsPartition(partition_index=0, timestamp=-1)])], version=7),
        "ListGroups v2": lambda: ListGroupsRequest(version=2),
        "ListGroups v4 (flexible)": lambda: ListGroupsRequest(version=4),
        "DescribeGroups v4": lambda: DescribeGroupsRequest(groups=["g"], version=4),
        "FindCoordinator v2": lambda: FindCoordinatorRequest(key="g", key_type=0, version=2),
        "Heartbeat v3": lambda: HeartbeatRequest(group_id="g", generation_id=1, member_id="m", version=3),
        "OffsetFetch v5": lambda: OffsetFetchRequest(group_id="g", topics=None, version=5),
        "OffsetDelete v0 (after the error code)": lambda: OffsetDeleteRequest(group_id="g", topics=[
            OD(name="throttled", partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)])], version=0),
        "CreateTopics v4": lambda: CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="throttled", num_partitions=1, replication_factor=1)], timeout_ms=5000, version=4),
        "DeleteTopics v3": lambda: DeleteTopicsRequest(topic_names=["no-such"], timeout_ms=5000, version=3),
        "DescribeConfigs v2": lambda: DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=2, resource_name="throttled", configuration_keys=None)], version=2),
        "DescribeLogDirs v1": lambda: DescribeLogDirsRequest(topics=None, version=1),
        "DescribeAcls v1": lambda: DescribeAclsRequest(resource_type_filter=1, pattern_type_filter=1,
                                                       permission_type=1, operation=1, version=1),
        "InitProducerId v1": lambda: InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000,
                                                           version=1),
        "ListTransactions v0 (flexible)": lambda: ListTransactionsRequest(version=0),
    }
    _throttle_of(cluster.bootstrap, "busy", MetadataRequest(topics=None, version=8))  # over its quota from here
    for name, request in requests.items():
        busy, calm = _throttle_of(cluster.bootstrap, "busy", request()), \
            _throttle_of(cluster.bootstrap, "calm", request())
        assert calm == 0, name
        if "no field" in name:
            assert busy == 0, name
        else:
            assert 0 < busy <= WINDOWS * 1000, (name, busy)


def test_controller_mutation_rate_throttles_topic_changes(cluster, admin):
    """KIP-599 for the versions ferry serves (before THROTTLING_QUOTA_EXCEEDED): a client creating or deleting
    partitions faster than its controller_mutation_rate has the change made and is throttled; the partitions
    counted are the ones created (CreateTopics, CreatePartitions) or deleted (DeleteTopics)."""
    assert _alter(admin, 1, [(_entity(client="mutator"), [("controller_mutation_rate", 2.0, False)])])[0][0] == 0
    ca = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def create(name: str, partitions: int) -> CreateTopicsRequest:
        return CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=10000, version=4)
    assert _throttle_of(cluster.bootstrap, "mutator", create("m-small", 1)) == 0  # 1 partition: within 2/s
    big = _throttle_of(cluster.bootstrap, "mutator", create("m-big", 12))  # 13 in the first second: over
    assert 1000 <= big <= WINDOWS * 1000
    assert _throttle_of(cluster.bootstrap, "other", create("m-other", 12)) == 0  # no quota for this client id
    topics = ca.list_topics(timeout=30).topics
    assert len(topics["m-big"].partitions) == 12 and "m-small" in topics  # made, then throttled
    deleted = _throttle_of(cluster.bootstrap, "mutator", DeleteTopicsRequest(topic_names=["m-big"], timeout_ms=10000,
                                                                             version=3))
    assert deleted > 0
    code, _msg, found = _describe(admin, 1, [("client-id", 0, "mutator")], strict=True)
    assert found == {(("client-id", "mutator"),): {"controller_mutation_rate": 2.0}}


# ---------------------------------------------------------------------------------------------- ferry configs


def ferry(*argv: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "ferry.cli", "configs", *argv], capture_output=True, text=True,
                          timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def test_ferry_configs_clients_and_users_over_the_brokers(cluster, admin):
    b = ("--bootstrap-server", cluster.bootstrap)
    rc, out, err = ferry(*b, "--alter", "--entity-type", "clients", "--entity-name", "cli-app",
                         "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert (rc, out) == (0, "Completed updating config for client-id 'cli-app'.\n"), err
    rc, out, err = ferry(*b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                         "clients", "--entity-default", "--add-config", "request_percentage=50")
    assert (rc, out) == (0, "Completed updating config for user-principal 'alice', the default client-id.\n"), err
    rc, out, err = ferry(*b, "--describe", "--entity-type", "clients", "--entity-name", "cli-app")
    assert out == ("Quota configs for client-id 'cli-app' are consumer_byte_rate=2097152.0, "
                   "producer_byte_rate=1048576.0\n"), err
    rc, out, err = ferry(*b, "--describe", "--entity-type", "users", "--entity-type", "clients", "--json")
    assert rc == 0 and {"entity": {"user": "alice", "client-id": None}, "quotas": {"request_percentage": 50.0}} \
        in json.loads(out), err
    # what the CLI stored is what an AdminClient sees
    assert _describe(admin, 1, [("client-id", 0, "cli-app")], strict=True)[2] == {
        (("client-id", "cli-app"),): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0}}
    rc, out, err = ferry(*b, "--alter", "--entity-type", "clients", "--entity-name", "cli-app",
                         "--delete-config", "consumer_byte_rate")
    assert rc == 0, err
    assert ferry(*b, "--describe", "--entity-type", "clients", "--entity-name", "cli-app")[1] == (
        "Quota configs for client-id 'cli-app' are producer_byte_rate=1048576.0\n")


def test_ferry_configs_quotas_over_zookeeper(cluster, admin):
    z = ("--zookeeper", cluster.zk_connect)
    rc, out, err = ferry(*z, "--alter", "--entity-type", "clients", "--entity-default", "--add-config",
                         "consumer_byte_rate=5000")
    assert rc == 0, err
    rc, out, err = ferry(*z, "--describe", "--entity-type", "clients", "--entity-default")
    assert out.startswith("Quota configs for the default client-id are ") and "consumer_byte_rate=5000.0" in out, err
    assert _describe(admin, 0, [("client-id", 1, None)], strict=True)[2][(("client-id", None),)][
        "consumer_byte_rate"] == 5000.0


@pytest.mark.parametrize("argv, message", [
    (("--alter", "--entity-type", "clients", "--entity-name", "a", "--add-config", "producer_byte_rate=fast"),
     "a quota is a number"),
    (("--alter", "--entity-type", "clients", "--entity-name", "a", "--add-config", "retention.ms=1"),
     "is not a client quota"),
    (("--alter", "--entity-type", "clients", "--add-config", "producer_byte_rate=1"), "--entity-name NAME or"),
    (("--alter", "--entity-type", "clients", "--entity-name", "a", "--add-config", "producer_byte_rate=-1"),
     "positive"),
    (("--describe", "--entity-type", "users", "--entity-name", "u", "--entity-type", "clients"), "same order"),
])
def test_ferry_configs_bad_quota_input(cluster, argv, message, capsys):
    """Refused before any request (in-process: the same entry point as the console script)."""
    rc = cli_main(["configs", "--bootstrap-server", cluster.bootstrap, *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_a_followers_fetch_is_not_a_clients():
    """Replication is not held by client quotas: a Fetch with a broker's replica id is not counted."""
    q = ClientQuotas()
    q.update({QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 1.0}})
    throttle = ChannelThrottle(q, Session(ANONYMOUS, "127.0.0.1"))
    header = b"\x00\x01\x00\x0b\x00\x00\x00\x07\x00\x02id"
    follower, consumer = header + b"\x00\x00\x00\x02" + b"\0" * 40, header + b"\xff\xff\xff\xff" + b"\0" * 40
    answer = b"\0" * 4 + b"x" * 5000
    assert throttle.start().answer(1, follower, answer) is answer and not throttle.muted_until
    patched = throttle.start().answer(1, consumer, answer)
    assert int.from_bytes(patched[:4], "big") > 1000 and throttle.still_muted()


def test_a_produce_answer_carries_the_throttle_and_the_channel_stays_muted():
    """The fast path's framed answer keeps its type (bytes) with throttle_time_ms, its last field, set."""
    q = ClientQuotas()
    q.update({QuotaEntity(None, "p"): {PRODUCE: 1000.0}})
    throttle = ChannelThrottle(q, Session(ANONYMOUS, "127.0.0.1"))
    frame = b"\x00\x00\x00\x08\x00\x00\x00\x09\x00\x01p" + b"r" * 3000
    answer = b"\x00\x00\x00\x10\x00\x00\x00\x09" + b"a" * 8 + b"\x00\x00\x00\x00"
    out = throttle.start().answer(0, frame, answer)
    assert type(out) is bytes and out[:-4] == answer[:-4]
    assert 1500 <= int.from_bytes(out[-4:], "big") <= 2100  # ~3 KB over 1 KB/s in its first window: ~2 s
    assert throttle.still_muted()
    other = ChannelThrottle(q, Session(ANONYMOUS, "127.0.0.1"))
    assert other.start().answer(0, frame.replace(b"\x00\x01p", b"\x00\x01o", 1), answer) is answer
    assert not other.muted_until  # another client id: no quota, untouched


# ---------------------------------------------------------------------------------------------- ACLs


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("quotas-acl"), f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/live", "live")
    c.add_broker(extra_args=AUTHORIZER_ARGS)
    yield c
    c.stop()


def test_describing_needs_describe_configs_and_altering_alter_configs_on_the_cluster(secured):
    a = KafkaAdminClient(bootstrap_servers=secured.bootstrap, client_id="quota-admin")
    try:
        assert _describe(a, 1, [])[0] == 31  # CLUSTER_AUTHORIZATION_FAILED
        grant(secured.zk_connect, binding(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.DESCRIBE_CONFIGS))
        eventually(lambda: _describe(a, 1, [])[0] == 0)
        assert _alter(a, 1, [(_entity(client="x"), [("producer_byte_rate", 5.0, False)])])[0][0] == 31
        grant(secured.zk_connect, binding(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.ALTER_CONFIGS))
        eventually(lambda: _alter(a, 1, [(_entity(client="x"), [("producer_byte_rate", 5.0, False)])])[0][0] == 0)
        assert _describe(a, 1, [("client-id", 0, "x")])[2] == {(("client-id", "x"),): {"producer_byte_rate": 5.0}}
    finally:
        a.close()


def test_idle_rates_are_forgotten():
    """A default quota gives every client id a rate: those of clients gone quiet do not pile up."""
    m = QuotaManager(PRODUCE)
    m.update({QuotaEntity(None, DEFAULT): {PRODUCE: 1000.0}})
    for i in range(100):
        m.record("u", f"client-{i}", 10, 1000.0)
    assert len(m.measured()) == 100
    m.record("u", "late", 10, 1100.0)  # > 60 s later: the others' windows are empty
    assert m.measured() == [("", "late")]
