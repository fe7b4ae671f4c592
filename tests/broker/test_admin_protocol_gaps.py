"""The APIs admin clients reach for beyond the basics, each through a client nobody here wrote, against real ferry
brokers: ElectLeaders (preferred elections through the controller), OffsetDelete (KIP-496), ListOffsets v7's
MAX_TIMESTAMP (KIP-734), ListGroups v4 with real states and DescribeGroups with the members' hosts (KIP-848's
consumer protocol: test_consumer_protocol.py)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as ATopicPartition
from confluent_kafka import Consumer, ConsumerGroupState, ElectionType, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NoError,
    TransactionalIdNotFoundError,
)
from kafka.structs import OffsetAndMetadata

from tests.conftest import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("gaps"), f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/live", "live")
    for _ in range(2):
        c.add_broker(extra_args=("--override", "group.initial.rebalance.delay.ms=0", "--override",
                                 "auto.leader.rebalance.enable=false", "--flush-ms", "10"))
    yield c
    c.stop()


def create(admin: AdminClient, topic: NewTopic) -> None:
    admin.create_topics([topic])[topic.topic].result(30)
    deadline = time.monotonic() + 20
    while True:
        t = admin.list_topics(timeout=10).topics.get(topic.topic)
        if t is not None and t.partitions and all(p.leader >= 0 for p in t.partitions.values()):
            return
        assert time.monotonic() < deadline, f"{topic.topic} has no leaders"
        time.sleep(0.2)


def partition_md(admin: AdminClient, topic: str, p: int = 0):
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[p]


def wait_for(what: str, cond, timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def test_offset_delete_rules(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, NewTopic("od1", 2, 1))
    create(admin, NewTopic("od2", 1, 1))
    k = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        k.alter_group_offsets("odg", {TopicPartition(t, p): OffsetAndMetadata(1, "", -1)
                                      for t, p in (("od1", 0), ("od1", 1), ("od2", 0))})
        got = k.delete_group_offsets("odg", [TopicPartition("od1", 0), TopicPartition("od1", 1)])
        assert set(got.values()) == {NoError}
        assert set(k.list_group_offsets("odg")["odg"]) == {TopicPartition("od2", 0)}
        with pytest.raises(GroupIdNotFoundError):
            k.delete_group_offsets("no-such-group", [TopicPartition("od1", 0)])

        member = KafkaConsumer("od2", bootstrap_servers=cluster.bootstrap, group_id="odg", enable_auto_commit=False,
                               session_timeout_ms=6000)
        try:
            wait_for("the member joined", lambda: (member.poll(200), bool(member.assignment()))[1])
            # a live member subscribes to od2: its offsets stay (GROUP_SUBSCRIBED_TO_TOPIC)
            got = k.delete_group_offsets("odg", [TopicPartition("od2", 0)])
            assert got == {TopicPartition("od2", 0): GroupSubscribedToTopicError}
        finally:
            member.close()
        assert set(k.list_group_offsets("odg")["odg"]) == {TopicPartition("od2", 0)}
        k.delete_group_offsets("odg", [TopicPartition("od2", 0)])  # empty now: allowed
        assert not k.list_group_offsets("odg")["odg"]
    finally:
        k.close()


def test_list_offsets_max_timestamp(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, NewTopic("mt", 1, 1))
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    base = 1_700_000_000_000
    for i, ts in enumerate([base + 5, base + 50, base + 20]):  # one batch each: the largest is in the middle
        p.produce("mt", b"v%d" % i, partition=0, timestamp=ts)
        p.flush(10)
    tp = CTopicPartition("mt", 0)
    got = next(iter(admin.list_offsets({tp: OffsetSpec.max_timestamp()}).values())).result(20)
    assert (got.offset, got.timestamp) == (1, base + 50)
    got = next(iter(admin.list_offsets({tp: OffsetSpec.latest()}).values())).result(20)
    assert got.offset == 3

    async def aio() -> tuple:
        c = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap)
        await c.start()
        try:
            atp = ATopicPartition("mt", 0)
            return (await c.end_offsets([atp]))[atp], (await c.offsets_for_times({atp: base + 10}))[atp].offset
        finally:
            await c.stop()

    assert asyncio.run(aio()) == (3, 1)


def test_group_states_and_member_hosts(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, NewTopic("gs", 2, 1))
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "gs-live", "session.timeout.ms": 6000})
    c.subscribe(["gs"])
    try:
        def stable() -> bool:
            c.poll(0.2)
            return {g.group_id: g.state.name for g in admin.list_consumer_groups().result(20).valid}.get(
                "gs-live") == "STABLE"
        wait_for("the group is listed Stable", stable)
        d = admin.describe_consumer_groups(["gs-live"])["gs-live"].result(20)
        assert d.state.name == "STABLE" and [m.host for m in d.members] == ["/127.0.0.1"]
    finally:
        c.close()
    k = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        k.alter_group_offsets("gs-idle", {TopicPartition("gs", 0): OffsetAndMetadata(0, "", -1)})
    finally:
        k.close()
    listed = {g.group_id: g.state.name for g in admin.list_consumer_groups().result(20).valid}
    assert listed["gs-idle"] == "EMPTY"
    only_empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(20).valid
    assert "gs-idle" in {g.group_id for g in only_empty} and all(g.state.name == "EMPTY" for g in only_empty)


def test_transactions_and_producers_described(cluster):
    """ListTransactions, DescribeTransactions, DescribeProducers (KIP-664) through kafka-python's admin client,
    about a confluent-kafka transactional producer with a transaction open, then committed."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, NewTopic("txd", 1, 1))
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "txd-1"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("txd", b"x", partition=0)
    p.flush(10)
    k = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        listed = {t.transactional_id: t for ts in k.list_transactions().values() for t in ts}
        assert listed["txd-1"].state.value == "Ongoing"
        d = k.describe_transactions(["txd-1"])["txd-1"]
        assert (d.state.value, d.topic_partitions, d.producer_id) == ("Ongoing", {TopicPartition("txd", 0)},
                                                                    listed["txd-1"].producer_id)
        with pytest.raises(TransactionalIdNotFoundError):
            k.describe_transactions(["nobody"])
        active = k.describe_producers([TopicPartition("txd", 0)])[TopicPartition("txd", 0)].active_producers
        assert [(a.producer_id, a.last_sequence, a.current_transaction_start_offset) for a in active] == [
            (d.producer_id, 0, 0)]
        p.commit_transaction(30)
        done = {t.transactional_id for ts in k.list_transactions(state_filters=["CompleteCommit"]).values()
                for t in ts}
        assert "txd-1" in done
        active = k.describe_producers([TopicPartition("txd", 0)])[TopicPartition("txd", 0)].active_producers
        assert [a.current_transaction_start_offset for a in active] == [-1]
    finally:
        k.close()


def test_elect_leaders_moves_leadership_back_to_the_preferred_replica(cluster):
    """Last in the module: it restarts broker 1."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, NewTopic("el", 1, replica_assignment=[[1, 2]]))
    wait_for("both replicas in sync", lambda: sorted(partition_md(admin, "el").isrs) == [1, 2])
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.brokers[2].bootstrap, request_timeout_ms=30_000)
    try:  # already led by its preferred replica: ELECTION_NOT_NEEDED (84)
        resp = kadmin.elect_leaders(0, {"el": [0]}, raise_errors=False)
        assert [(r.topic, p.partition_id, p.error_code) for r in resp.replica_election_results
                for p in r.partition_result] == [("el", 0, 84)]
    finally:
        kadmin.close()

    cluster.brokers[1].stop()
    admin = AdminClient({"bootstrap.servers": cluster.brokers[2].bootstrap})
    wait_for("broker 2 leads", lambda: partition_md(admin, "el").leader == 2)
    cluster.brokers[1].start()
    wait_for("broker 1 back in the ISR", lambda: sorted(partition_md(admin, "el").isrs) == [1, 2])
    assert partition_md(admin, "el").leader == 2  # no automatic rebalance here

    got = admin.elect_leaders(ElectionType.PREFERRED, [CTopicPartition("el", 0)]).result(60)
    assert {(tp.topic, tp.partition): err for tp, err in got.items()} == {("el", 0): None}
    wait_for("broker 1 leads again", lambda: partition_md(admin, "el").leader == 1, timeout=10)
