"""ACLs end to end: a real broker with the authorizer on (authorizer.class.name=ferry), real clients
(confluent-kafka, kafka-python) connecting as User:ANONYMOUS over PLAINTEXT, ACLs written to ZooKeeper as
`ferry acls --zookeeper` writes them. Without ACLs ANONYMOUS can do nothing; each ACL allows exactly its part;
a Deny wins; prefixed and wildcard patterns; a revoked ACL bites a live connection within seconds; each denial
is logged; super.users bypass; and without an authorizer the broker behaves as before."""

from __future__ import annotations

import time
import uuid

import pytest
from acl_helpers import ANON, AUTHORIZER_ARGS, binding, eventually, grant, revoke
from broker_wire import WireClient, fetch, list_offsets, metadata, parse_produce, produce_body, start_brokers
from broker_wire import build_batch as batch
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KResourceType
from kafka.errors import ClusterAuthorizationFailedError, SecurityDisabledError

from ferry.embedded import BrokerProcess, EmbeddedError
from ferry.wire.broker_connection import BrokerConnection
from ferry.wire.protocol import fetch as fetch_api
from ferry.wire.protocol import offset_for_leader_epoch as ofle
from ferry.wire.protocol import write_txn_markers
from ferry.wire.protocol.acl_types import CLUSTER_NAME, AclOperation, PatternType, ResourceType
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.errors import ErrorCode
from ferry.zk import ClusterRegistry

pytestmark = pytest.mark.timeout(180)
TOPIC, GROUP, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
READ, WRITE, CREATE, DESCRIBE, ALL = (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                                      AclOperation.DESCRIBE, AclOperation.ALL)


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    """One broker with the authorizer on and no super user: (zk connect, broker)."""
    zk, brokers = start_brokers(zk_server.connect, tmp_path_factory.mktemp("acls"), 1, extra_args=AUTHORIZER_ARGS)
    yield zk, brokers[0]
    brokers[0].stop()


def controller_known(bootstrap: str) -> None:
    """Wait until Metadata names a controller (librdkafka's admin calls wait for one, and re-ask slowly)."""
    with WireClient(bootstrap) as c:
        eventually(lambda: metadata(c, None)["controller"] >= 0)


def make_topics(zk: str, *names: str, partitions: int = 1) -> None:
    """Topics created in the registry directly (ANONYMOUS may not create them through the broker)."""
    with ClusterRegistry(zk) as reg:
        for name in names:
            reg.create_topic(name, partitions, None, 1)


def produce_errors(bootstrap: str, topic: str, n: int = 1, **conf) -> list:
    """What confluent-kafka's delivery reports say for ``n`` messages (None: delivered)."""
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 8000, **conf})
    out: list = []
    for i in range(n):
        p.produce(topic, b"v%d" % i, on_delivery=lambda err, _msg: out.append(err and err.code()))
    p.flush(15)
    return out


def wire_produce(client: WireClient, topic: str) -> int:
    r = client.request(ApiKey.PRODUCE, 8, produce_body(topic, 0, batch([b"x"]), acks=1))
    return parse_produce(r)[(topic, 0)].error


def poll_error(consumer: Consumer, timeout: float = 15.0, want: int | None = None) -> int | None:
    """The first error the consumer reports (``want``: that one, if it comes within ``timeout``)."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
            seen = m.error().code()
            if want is None or seen == want:
                return seen
    return seen


# ------------------------------------------------------------------------------------------------ nothing allowed

def test_without_acls_anonymous_can_do_nothing(secured):
    zk, broker = secured
    make_topics(zk, "locked")
    # produce: confluent-kafka's delivery report says TOPIC_AUTHORIZATION_FAILED
    assert produce_errors(broker.bootstrap, "locked") == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # Metadata hides the topic from a listing, and answers 29 for it by name
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "locked" not in admin.list_topics(timeout=10).topics
    with WireClient(broker.bootstrap) as c:
        assert metadata(c, None)["topics"] == {}
        assert metadata(c, ["locked"])["topics"]["locked"][0] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert wire_produce(c, "locked") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # create and delete topics
    with pytest.raises(KafkaException) as e:
        admin.create_topics([NewTopic("locked-new", 1, 1)])["locked-new"].result(30)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        admin.delete_topics(["locked"])["locked"].result(30)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # consume without a group: Fetch and ListOffsets refused; confluent-kafka's consumer reports it
    with WireClient(broker.bootstrap) as c:
        assert fetch(c, "locked", 0, 0).error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert list_offsets(c, "locked", 0, -1)[0] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    grant(zk, binding(GROUP, "locked-sub", READ))  # the group allowed: the topic is what is refused
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "locked-sub"})
    try:
        consumer.subscribe(["locked"])
        denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert poll_error(consumer, want=denied) == denied
    finally:
        consumer.close()
    # join a group: GROUP_AUTHORIZATION_FAILED
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "locked-g"})
    try:
        consumer.subscribe(["locked"])
        assert poll_error(consumer) == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    # a transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    tp = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "locked-tx"})
    with pytest.raises(KafkaException) as e:
        tp.init_transactions(15)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # an idempotent producer (no transactional id) needs IdempotentWrite or Write somewhere: CLUSTER_AUTHORIZATION_FAILED
    errs = produce_errors(broker.bootstrap, "locked", **{"enable.idempotence": True})
    assert errs and errs[0] in (KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    # reading ACLs needs Describe on the cluster (kafka-python raises the top-level error; librdkafka 2.16
    # ignores a DescribeAcls answer's top-level error and reports an empty list)
    with pytest.raises(ClusterAuthorizationFailedError):
        kafka_python_describe_acls(broker.bootstrap)
    # each denial is logged with principal, operation, host, resource and request
    log = broker.log_file.read_text()
    assert ("Principal = User:ANONYMOUS is Denied Operation = Write from host = 127.0.0.1 on resource = Topic:locked "
            "for request = PRODUCE") in log
    assert "Denied Operation = Create from host = 127.0.0.1 on resource = Topic:locked-new" in log
    assert "Denied Operation = Read from host = 127.0.0.1 on resource = Group:locked-g" in log or \
        "Denied Operation = Describe from host = 127.0.0.1 on resource = Group:locked-g" in log


def kafka_python_describe_acls(bootstrap: str) -> list:
    """Every ACL, as kafka-python's KafkaAdminClient describes them (it raises the answer's error)."""
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    try:
        return kadmin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                              ResourcePatternFilter(KResourceType.ANY, None,
                                                                    ACLResourcePatternType.ANY)))[0]
    finally:
        kadmin.close()


# ------------------------------------------------------------------------------------------------ each ACL allows its part

def test_acls_for_anonymous_allow_each_operation(secured):
    zk, broker = secured
    make_topics(zk, "open", "open-hidden")
    grant(zk, binding(TOPIC, "open", WRITE), binding(TOPIC, "open", READ), binding(GROUP, "open-g", READ),
          binding(TOPIC, "open-made", CREATE), binding(TXN, "open-tx", WRITE))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # Write: produced (the cache follows ZooKeeper's change notification within seconds)
    eventually(lambda: produce_errors(broker.bootstrap, "open") == [None])
    assert produce_errors(broker.bootstrap, "open", 5) == [None] * 5
    # Describe (implied by Read/Write): listed; the topic without ACLs stays hidden
    topics = admin.list_topics(timeout=10).topics
    assert "open" in topics and "open-hidden" not in topics
    # Read on the topic and the group: consumed as a member of the group, offsets committed
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "open-g", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe(["open"])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert len(got) == 6
        consumer.commit(asynchronous=False)
        assert consumer.committed([TopicPartition("open", 0)], timeout=10)[0].offset == 6
    finally:
        consumer.close()
    # Create on the topic name: created
    admin.create_topics([NewTopic("open-made", 1, 1)])["open-made"].result(30)
    # Write on the transactional id (and the topic): a transaction commits
    tp = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "open-tx"})
    tp.init_transactions(20)
    tp.begin_transaction()
    tp.produce("open", b"in-txn")
    tp.commit_transaction(20)


def test_deny_wins_over_allow(secured):
    zk, broker = secured
    make_topics(zk, "mixed")
    grant(zk, binding(TOPIC, "mixed", ALL), binding(TOPIC, "mixed", WRITE, allow=False))
    with WireClient(broker.bootstrap) as c:
        eventually(lambda: metadata(c, ["mixed"])["topics"]["mixed"][0] == 0)  # All allows Describe
        assert wire_produce(c, "mixed") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # Read is still allowed (the Deny names Write only)
    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        kc.assign([KTopicPartition("mixed", 0)])
        kc.seek_to_beginning()
        assert kc.poll(timeout_ms=2000) == {}
    finally:
        kc.close()


def test_revoked_acl_bites_a_live_connection_within_seconds(secured):
    zk, broker = secured
    make_topics(zk, "revoked")
    acl = binding(TOPIC, "revoked", WRITE)
    grant(zk, acl)
    with WireClient(broker.bootstrap) as c:
        eventually(lambda: wire_produce(c, "revoked") == 0)
        revoke(zk, acl)
        t0 = time.monotonic()
        eventually(lambda: wire_produce(c, "revoked") == ErrorCode.TOPIC_AUTHORIZATION_FAILED, timeout=5.0,
                   interval=0.05)
        assert time.monotonic() - t0 < 5.0


# ------------------------------------------------------------------------------------------------ patterns

def test_prefixed_and_wildcard_patterns(zk_server, tmp_path):
    zk, brokers = start_brokers(zk_server.connect, tmp_path, 1, extra_args=AUTHORIZER_ARGS)
    try:
        boot = brokers[0].bootstrap
        make_topics(zk, "app.clicks", "apple", "other")
        grant(zk, binding(TOPIC, "app.", WRITE, pattern=PatternType.PREFIXED),
              binding(TOPIC, "*", READ, principal="User:*"))
        with WireClient(boot) as c:
            eventually(lambda: wire_produce(c, "app.clicks") == 0)
            assert wire_produce(c, "apple") == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # "app." is not a prefix of it
            assert wire_produce(c, "other") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            # the wildcard Read (for every user) makes every topic describable
            eventually(lambda: set(metadata(c, None)["topics"]) == {"app.clicks", "apple", "other"})
        # a prefixed Deny takes it back for a part of the names
        grant(zk, binding(TOPIC, "app.cl", WRITE, allow=False, pattern=PatternType.PREFIXED))
        with WireClient(boot) as c:
            eventually(lambda: wire_produce(c, "app.clicks") == ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    finally:
        brokers[0].stop()


# ------------------------------------------------------------------------------------------------ super users, no authorizer

def test_super_users_bypass_acls(zk_server, tmp_path):
    zk, brokers = start_brokers(zk_server.connect, tmp_path, 2, extra_args=(
        *AUTHORIZER_ARGS, "--override", f"super.users=User:admin;{ANON}"))
    try:
        boot = brokers[0].bootstrap
        controller_known(boot)
        admin = AdminClient({"bootstrap.servers": boot})
        admin.create_topics([NewTopic("su", 2, 2)])["su"].result(30)  # replicated: the followers are super users too
        assert produce_errors(boot, "su", 5, acks="all") == [None] * 5
        consumer = Consumer({"bootstrap.servers": boot, "group.id": "su-g", "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["su"])
            got = 0
            deadline = time.monotonic() + 30
            while got < 5 and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                got += m is not None and m.error() is None
            assert got == 5
        finally:
            consumer.close()
    finally:
        for b in brokers:
            b.stop()


def test_without_authorizer_everything_as_before(zk_server, tmp_path):
    _zk, brokers = start_brokers(zk_server.connect, tmp_path, 1, extra_args=("--flush-ms", "10"))
    try:
        boot = brokers[0].bootstrap
        controller_known(boot)
        admin = AdminClient({"bootstrap.servers": boot})
        admin.create_topics([NewTopic("plain", 1, 1)])["plain"].result(30)
        assert produce_errors(boot, "plain", 3) == [None] * 3
        with pytest.raises(SecurityDisabledError):  # as Kafka without an authorizer
            kafka_python_describe_acls(boot)
        assert "Denied" not in brokers[0].log_file.read_text()
    finally:
        brokers[0].stop()


def test_unknown_authorizer_name_stops_the_broker(zk_server, tmp_path):
    b = BrokerProcess(1, tmp_path / "data", f"{zk_server.connect}/t/{uuid.uuid4().hex[:8]}", "live",
                      extra_args=("--override", "authorizer.class.name=com.example.Nope"))
    with pytest.raises(EmbeddedError):
        b.start(timeout=15)
    b.stop()
    assert "authorizer.class.name: 'com.example.Nope' is not an authorizer ferry has" in b.log_file.read_text()



# ------------------------------------------------------------------------------------------------ inter-broker requests

def test_inter_broker_requests_need_cluster_action(secured):
    """A follower's Fetch, its OffsetForLeaderEpoch and a coordinator's WriteTxnMarkers need ClusterAction: over
    PLAINTEXT they arrive as ANONYMOUS, which is why replication with ACLs needs it in super.users."""
    zk, broker = secured
    make_topics(zk, "replicated")
    grant(zk, binding(TOPIC, "replicated", READ))  # a consumer's Read does not make a follower
    host, port = broker.bootstrap.split(":")
    conn = BrokerConnection(1, host, int(port))
    try:
        def follower_fetch() -> int:
            r = fetch_api.parse_response(conn.request(*fetch_api.encode_request(
                [("replicated", [fetch_api.FetchPartition(0, 0, 1 << 20)])], 0, 1, 1 << 20, replica_id=2)))
            return r.topics["replicated"][0].error_code

        assert follower_fetch() == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        epochs = ofle.parse_response(conn.request(*ofle.encode_request(
            [("replicated", [ofle.EpochRequestPartition(0, 0)])], replica_id=2)))
        assert epochs["replicated"][0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        markers = write_txn_markers.parse_response(conn.request(*write_txn_markers.encode_request(
            [write_txn_markers.TxnMarker(7, 0, True, [("replicated", [0])])])))
        assert markers == {7: {("replicated", 0): ErrorCode.CLUSTER_AUTHORIZATION_FAILED}}
        grant(zk, binding(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.CLUSTER_ACTION))
        eventually(lambda: follower_fetch() == 0)
    finally:
        conn.close()


def test_offset_fetch_needs_describe_on_the_topic(secured):
    zk, broker = secured
    make_topics(zk, "of-secret")
    grant(zk, binding(GROUP, "of-g", READ))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "of-g"})
    try:
        def committed_error() -> int | None:
            (tp,) = consumer.committed([TopicPartition("of-secret", 0)], timeout=10)
            return tp.error and tp.error.code()

        assert eventually(committed_error) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_auto_creation_needs_create(zk_server, tmp_path):
    zk, brokers = start_brokers(zk_server.connect, tmp_path, 1, extra_args=(
        *AUTHORIZER_ARGS, "--override", "auto.create.topics.enable=true"))
    try:
        boot = brokers[0].bootstrap
        grant(zk, binding(TOPIC, "auto-ok", WRITE), binding(TOPIC, "auto-ok", CREATE),
              binding(TOPIC, "auto-nocreate", WRITE))
        # Metadata created it: Create on the topic (once the broker followed the notifications)
        eventually(lambda: produce_errors(boot, "auto-ok") == [None])
        assert produce_errors(boot, "auto-nocreate") == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
        with ClusterRegistry(zk) as reg:
            assert set(reg.topics()) == {"auto-ok"}
    finally:
        brokers[0].stop()
