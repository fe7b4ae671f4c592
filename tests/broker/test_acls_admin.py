"""DescribeAcls / CreateAcls / DeleteAcls through the admin clients nobody here wrote: confluent-kafka's AdminClient
and kafka-python's KafkaAdminClient against a real broker with the authorizer on. ANONYMOUS is given Alter and
Describe on the cluster (in ZooKeeper, as `ferry acls --zookeeper` would) so it may manage ACLs; the ACLs it
creates then govern produce requests."""

from __future__ import annotations

import pytest
from acl_helpers import AUTHORIZER_ARGS, binding, eventually, grant
from broker_wire import WireClient, parse_produce, produce_body, start_brokers
from broker_wire import build_batch as batch
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KResourceType

from ferry.wire.protocol import acl_types
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.errors import ErrorCode
from ferry.zk import ClusterRegistry, connect
from ferry.zk.acl_store import read_all

pytestmark = pytest.mark.timeout(120)
CLUSTER = acl_types.ResourceType.CLUSTER


@pytest.fixture(scope="module")
def managed(zk_server, tmp_path_factory):
    zk, brokers = start_brokers(zk_server.connect, tmp_path_factory.mktemp("acladmin"), 1, extra_args=AUTHORIZER_ARGS)
    grant(zk, binding(CLUSTER, acl_types.CLUSTER_NAME, acl_types.AclOperation.ALTER),
          binding(CLUSTER, acl_types.CLUSTER_NAME, acl_types.AclOperation.DESCRIBE))
    with ClusterRegistry(zk) as reg:
        reg.create_topic("adm", 1, None, 1)
    yield zk, brokers[0]
    brokers[0].stop()


def stored(zk: str) -> dict:
    client = connect(zk)
    try:
        return read_all(client)
    finally:
        client.stop()
        client.close()


def wire_produce(bootstrap: str, topic: str) -> int:
    with WireClient(bootstrap) as c:
        r = c.request(ApiKey.PRODUCE, 8, produce_body(topic, 0, batch([b"x"]), acks=1))
        return parse_produce(r)[(topic, 0)].error


def test_confluent_admin_client_creates_describes_and_deletes_acls(managed):
    zk, broker = managed
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    write = AclBinding(ResourceType.TOPIC, "adm", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    prefixed = AclBinding(ResourceType.GROUP, "team-", ResourcePatternType.PREFIXED, "User:alice", "10.0.0.1",
                          AclOperation.READ, AclPermissionType.DENY)
    eventually(lambda: _created(admin, [write, prefixed]))
    znodes = stored(zk)
    assert {(p.resource_type.title, p.name, p.pattern_type.name) for p in znodes} >= {
        ("Topic", "adm", "LITERAL"), ("Group", "team-", "PREFIXED")}
    # described, with the filter's pattern type honoured
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    found = admin.describe_acls(everything).result(30)
    assert write in found and prefixed in found
    only_topics = admin.describe_acls(AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                                       AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert write in only_topics and prefixed not in only_topics
    match = admin.describe_acls(AclBindingFilter(ResourceType.GROUP, "team-blue", ResourcePatternType.MATCH, None, None,
                                                 AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert match == [prefixed]
    # the ACL it created governs produce
    eventually(lambda: wire_produce(broker.bootstrap, "adm") == 0)
    # deleted: the answer lists what went, the broker enforces it
    gone = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "adm", ResourcePatternType.LITERAL, None, None,
                                               AclOperation.ANY, AclPermissionType.ANY)])
    assert [b for f in gone.values() for b in f.result(30)] == [write]
    eventually(lambda: wire_produce(broker.bootstrap, "adm") == ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    assert write not in admin.describe_acls(everything).result(30)


def _created(admin: AdminClient, bindings: list) -> bool:
    for f in admin.create_acls(bindings).values():
        f.result(30)
    return True


def test_kafka_python_admin_client_creates_describes_and_deletes_acls(managed):
    _zk, broker = managed
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        acl = ACL("User:bob", "*", ACLOperation.DESCRIBE_CONFIGS, ACLPermissionType.ALLOW,
                  ResourcePattern(KResourceType.TOPIC, "kp-", ACLResourcePatternType.PREFIXED))
        result = kadmin.create_acls([acl])
        assert result["failed"] == [] and result["succeeded"] == [acl]
        everything_of_bob = ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                      ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY))
        found, _err = kadmin.describe_acls(everything_of_bob)
        assert found == [acl]
        # an invalid binding (an UNKNOWN-free but unstorable one: the cluster under another name) is refused
        bad = ACL("User:bob", "*", ACLOperation.ALTER, ACLPermissionType.ALLOW,
                  ResourcePattern(KResourceType.CLUSTER, "not-the-cluster", ACLResourcePatternType.LITERAL))
        assert kadmin.create_acls([bad])["failed"]
        deleted = kadmin.delete_acls([everything_of_bob])
        assert deleted[0][1] == [acl]
        assert kadmin.describe_acls(everything_of_bob)[0] == []
    finally:
        kadmin.close()
