"""The admin APIs added for operators (ElectLeaders, OffsetDelete, DescribeTransactions, DescribeProducers,
ListTransactions) under the authorizer, through kafka-python's admin client as User:ANONYMOUS: each refused
with Kafka's code until its ACL exists, as Kafka authorizes them."""

from __future__ import annotations

import time

import pytest
from acl_helpers import AUTHORIZER_ARGS, binding, eventually, grant
from broker_wire import start_brokers
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)

from ferry.wire.protocol.acl_types import CLUSTER_NAME, AclOperation, ResourceType
from ferry.wire.protocol.errors import ErrorCode
from ferry.zk import ClusterRegistry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    zk, brokers = start_brokers(zk_server.connect, tmp_path_factory.mktemp("aclgaps"), 1, extra_args=AUTHORIZER_ARGS)
    with ClusterRegistry(zk) as reg:
        reg.create_topic("guarded", 1, None, 1)
    admin = KafkaAdminClient(bootstrap_servers=brokers[0].bootstrap, request_timeout_ms=20_000)
    yield zk, admin
    admin.close()
    brokers[0].stop()


def once_allowed(call, refused: type[Exception], timeout: float = 15.0):
    """``call()``'s outcome once the broker's ACL cache has the new ACL (it follows ZooKeeper within moments)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except refused:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_elect_leaders_needs_alter_on_the_cluster(secured):
    zk, admin = secured
    r = admin.elect_leaders(0, {"guarded": [0]}, raise_errors=False)
    assert r.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    grant(zk, binding(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.ALTER))
    r = eventually(lambda: (lambda r: r if r.error_code == 0 else None)(
        admin.elect_leaders(0, {"guarded": [0]}, raise_errors=False)))
    assert r.replica_election_results[0].partition_result[0].error_code == \
        ErrorCode.ELECTION_NOT_NEEDED


def test_offset_delete_needs_delete_on_the_group(secured):
    zk, admin = secured
    grant(zk, binding(ResourceType.GROUP, "g-acl", AclOperation.DESCRIBE))  # FindCoordinator's part

    def refused_by_offset_delete() -> bool:  # not by FindCoordinator (until the ACL above arrives)
        with pytest.raises(GroupAuthorizationFailedError) as e:
            admin.delete_group_offsets("g-acl", [TopicPartition("guarded", 0)])
        return "OffsetDelete" in str(e.value)

    eventually(refused_by_offset_delete)  # Delete on the group is missing
    grant(zk, binding(ResourceType.GROUP, "g-acl", AclOperation.DELETE))
    with pytest.raises(GroupIdNotFoundError):  # allowed now: the group has no offsets at all
        once_allowed(lambda: admin.delete_group_offsets("g-acl", [TopicPartition("guarded", 0)]),
                     GroupAuthorizationFailedError)


def test_transactions_need_describe_on_the_transactional_id(secured):
    zk, admin = secured
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        admin.describe_transactions(["t-acl"])
    grant(zk, binding(ResourceType.TRANSACTIONAL_ID, "t-acl", AclOperation.DESCRIBE))
    with pytest.raises(TransactionalIdNotFoundError):
        once_allowed(lambda: admin.describe_transactions(["t-acl"]), TransactionalIdAuthorizationFailedError)
    assert all(not ts for ts in admin.list_transactions().values())


def test_describe_producers_needs_read_on_the_topic(secured):
    zk, admin = secured
    grant(zk, binding(ResourceType.TOPIC, "guarded", AclOperation.DESCRIBE))  # to find the leader
    with pytest.raises(TopicAuthorizationFailedError):
        once_allowed(lambda: admin.describe_producers([TopicPartition("guarded", 0)]), UnknownTopicOrPartitionError)
    grant(zk, binding(ResourceType.TOPIC, "guarded", AclOperation.READ))
    got = once_allowed(lambda: admin.describe_producers([TopicPartition("guarded", 0)]),
                       TopicAuthorizationFailedError)
    assert got[TopicPartition("guarded", 0)].active_producers == []
