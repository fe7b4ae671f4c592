"""The admin APIs through the admin clients nobody here wrote — kafka-python's KafkaAdminClient and
confluent-kafka's AdminClient — against two real ferry brokers: configs (topic and broker), topic deletion
(logs gone from disk, registry and offsets cleaned), new partitions, record deletion, log dirs, and the
group listing, description and deletion of the group coordinator."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from broker_wire import WireClient, create_topic, leaders, start_brokers
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewPartitions as KNewPartitions
from kafka.errors import InvalidConfigurationError, UnknownTopicOrPartitionError

from ferry.zk import connect
from ferry.zk.group_offsets import group_path

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("admin")
    zk, brokers = start_brokers(zk_server.connect, root, 2, extra_args=(
        "--flush-ms", "10", "--override", "group.initial.rebalance.delay.ms=200"))
    yield zk, brokers
    for b in brokers:
        b.stop()


@pytest.fixture(scope="module")
def kadmin(cluster):
    _zk, brokers = cluster
    admin = KafkaAdminClient(bootstrap_servers=brokers[0].bootstrap, request_timeout_ms=20_000)
    yield admin
    admin.close()


@pytest.fixture(scope="module")
def cadmin(cluster):
    return AdminClient({"bootstrap.servers": cluster[1][0].bootstrap})


def make_topic(brokers, name: str, partitions: int = 2, messages: int = 0) -> None:
    with WireClient(brokers[0].bootstrap) as c:
        assert create_topic(c, name, partitions)[0] == 0
        leaders(c, name, partitions)
    if messages:
        p = KafkaProducer(bootstrap_servers=brokers[0].bootstrap)
        for i in range(messages):
            p.send(name, value=b"m%d" % i, partition=i % partitions)
        p.flush(30)
        p.close(5)


def result(futures: dict, timeout: float = 30):
    return {k: f.result(timeout) for k, f in futures.items()}


def data_dirs(brokers) -> list[Path]:
    return [Path(b.data_dir) for b in brokers]


# ------------------------------------------------------------------------------------------------ configs

def test_describe_configs_topic_and_broker(cluster, kadmin, cadmin):
    _zk, brokers = cluster
    make_topic(brokers, "cfg-d")
    with WireClient(brokers[0].bootstrap) as c:
        assert create_topic(c, "cfg-o", 1, configs={"retention.ms": "5000"})[0] == 0
    got = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "cfg-o")], config_filter="all",
                                  include_synonyms=True)["topic"]["cfg-o"]
    assert got["retention.ms"]["value"] == "5000" and got["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert got["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert got["flush.ms"] == {**got["flush.ms"], "value": "10", "config_source": "STATIC_BROKER_CONFIG"}
    assert {s["name"] for s in got["retention.ms"]["synonyms"]} == {"retention.ms", "log.retention.ms"}
    modified = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "cfg-o")])["topic"]["cfg-o"]
    assert set(modified) == {"retention.ms"}
    broker = kadmin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "2")],
                                     config_filter="all")["broker"]["2"]
    assert broker["broker.id"]["value"] == "2" and broker["log.flush.interval.ms"]["value"] == "10"
    assert broker["group.initial.rebalance.delay.ms"]["value"] == "200" and broker["broker.id"]["read_only"]

    (res, fut), = cadmin.describe_configs([ConfigResource("topic", "cfg-d")]).items()
    entries = fut.result(30)
    assert entries["retention.ms"].value == "604800000" and entries["cleanup.policy"].value == "delete"
    (res, fut), = cadmin.describe_configs([ConfigResource("broker", "1")]).items()
    assert fut.result(30)["broker.id"].value == "1"
    (res, fut), = cadmin.describe_configs([ConfigResource("topic", "nosuch")]).items()
    with pytest.raises(KafkaException) as e:
        fut.result(30)
    assert e.value.args[0].code() == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_alter_configs_validated_written_and_applied(cluster, kadmin, cadmin):
    zk, brokers = cluster
    make_topic(brokers, "cfg-a")
    res = ConfigResource("topic", "cfg-a", incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
    result(cadmin.incremental_alter_configs([res]))
    bad = ConfigResource("topic", "cfg-a", incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        result(cadmin.incremental_alter_configs([bad]))
    assert e.value.args[0].code() == 40 and "retention.ms" in e.value.args[0].str()  # INVALID_CONFIG, named
    broker = ConfigResource("broker", "1", incremental_configs=[
        ConfigEntry("log.retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        result(cadmin.incremental_alter_configs([broker]))
    assert e.value.args[0].code() == 42 and "restart" in e.value.args[0].str()  # INVALID_REQUEST, said why
    client = connect(zk)
    try:
        from ferry.zk.znodes import TopicInfo

        config = TopicInfo.decode("cfg-a", client.get("/brokers/topics/cfg-a")[0]).config
    finally:
        client.stop()
    assert config == {"retention.ms": "60000", "max.message.bytes": "2000"}
    # the brokers apply it: a batch over the new max.message.bytes is refused
    p = KafkaProducer(bootstrap_servers=brokers[0].bootstrap, max_request_size=100_000, retries=0)
    try:
        with pytest.raises(Exception, match="MessageSizeTooLarge|MESSAGE_TOO_LARGE|too large"):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until the topic watch delivered the new config
                p.send("cfg-a", value=b"x" * 5000, partition=0).get(10)
                time.sleep(0.1)
    finally:
        p.close(5)
    # kafka-python: incremental DELETE back to the default, and the non-incremental AlterConfigs
    kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "cfg-a",
                                          configs={"max.message.bytes": ("DELETE", None)})], incremental=True)
    got = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "cfg-a")])["topic"]["cfg-a"]
    assert set(got) == {"retention.ms"}
    kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "cfg-a", configs={"segment.ms": "3600000"})],
                         incremental=False, raise_on_unknown=False)
    got = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "cfg-a")])["topic"]["cfg-a"]
    assert set(got) == {"retention.ms", "segment.ms"}  # kafka-python re-sends the other overrides itself
    result(cadmin.alter_configs([ConfigResource("topic", "cfg-a", set_config={"segment.ms": "7200000"})]))
    got = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "cfg-a")])["topic"]["cfg-a"]
    assert set(got) == {"segment.ms"}  # AlterConfigs replaces the whole set
    refused = kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "cfg-a", configs={"segment.ms": "-5"})],
                                   incremental=True)["topic"]["cfg-a"]
    assert InvalidConfigurationError.__name__ in refused and "segment.ms" in refused


# ------------------------------------------------------------------------------------------------ topics

def test_delete_topics_removes_logs_registry_and_offsets(cluster, kadmin, cadmin):
    zk, brokers = cluster
    make_topic(brokers, "del-k", messages=10)
    make_topic(brokers, "del-c", messages=10)
    kafka_consumer_commit(brokers, "del-group", "del-k")
    assert any(d.name.startswith("del-k-") for root in data_dirs(brokers) for d in root.iterdir())
    kadmin.delete_topics(["del-k"])
    result(cadmin.delete_topics(["del-c"], operation_timeout=10))
    with pytest.raises(KafkaException) as e:
        result(cadmin.delete_topics(["del-c"], operation_timeout=10))
    assert e.value.args[0].code() == 3
    with pytest.raises(UnknownTopicOrPartitionError):
        kadmin.delete_topics(["del-k"])
    assert "del-k" not in kadmin.list_topics() and "del-c" not in cadmin.list_topics(timeout=10).topics
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        left = [d.name for root in data_dirs(brokers) for d in root.iterdir() if d.name.startswith("del-")]
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"logs left behind: {left}"
    client = connect(zk)
    try:
        assert client.exists(f"{group_path('del-group')}/del-k") is None  # the group's offsets of it went too
        assert client.exists("/brokers/topics/del-k") is None
    finally:
        client.stop()


def kafka_consumer_commit(brokers, group: str, topic: str) -> None:
    c = KafkaConsumer(bootstrap_servers=brokers[0].bootstrap, group_id=group, enable_auto_commit=False)
    try:
        c.assign([TopicPartition(topic, 0)])
        c.commit({TopicPartition(topic, 0): _offset(3)})
    finally:
        c.close()


def _offset(n: int):
    from kafka.structs import OffsetAndMetadata

    return OffsetAndMetadata(n, "", -1)


def test_create_partitions(cluster, kadmin, cadmin):
    _zk, brokers = cluster
    make_topic(brokers, "grow", partitions=1)
    kadmin.create_partitions({"grow": KNewPartitions(3)})
    result(cadmin.create_partitions([NewPartitions("grow", 4)]))
    assert len(cadmin.list_topics("grow", timeout=10).topics["grow"].partitions) == 4
    with pytest.raises(KafkaException) as e:
        result(cadmin.create_partitions([NewPartitions("grow", 2)]))
    assert e.value.args[0].code() == 37  # INVALID_PARTITIONS
    with pytest.raises(KafkaException) as e:
        result(cadmin.create_partitions([NewPartitions("grow", 6, replica_assignment=[[1], [2]])]))
    assert e.value.args[0].code() == 42 and "assignment" in e.value.args[0].str()


def test_delete_records_moves_the_log_start(cluster, kadmin, cadmin):
    _zk, brokers = cluster
    make_topic(brokers, "trim", partitions=1, messages=20)
    got = kadmin.delete_records({TopicPartition("trim", 0): 5})
    assert got[TopicPartition("trim", 0)]["low_watermark"] == 5
    (fut,) = cadmin.delete_records([CTopicPartition("trim", 0, 8)]).values()
    assert fut.result(30).low_watermark == 8
    c = KafkaConsumer(bootstrap_servers=brokers[0].bootstrap, auto_offset_reset="earliest", group_id=None)
    try:
        tp = TopicPartition("trim", 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        records = []
        deadline = time.monotonic() + 15
        while len(records) < 12 and time.monotonic() < deadline:
            for recs in c.poll(300).values():
                records.extend(recs)
        assert [r.offset for r in records] == list(range(8, 20))
        assert c.beginning_offsets([tp])[tp] == 8
    finally:
        c.close()
    (fut,) = cadmin.delete_records([CTopicPartition("trim", 0, 99)]).values()
    with pytest.raises(KafkaException) as e:
        fut.result(30)
    assert e.value.args[0].code() == 1  # OFFSET_OUT_OF_RANGE: above the high watermark


def test_describe_log_dirs(cluster, kadmin):
    _zk, brokers = cluster
    make_topic(brokers, "dirs", partitions=2, messages=4)
    dirs = kadmin.describe_log_dirs()
    seen = {}
    for entry in dirs:
        for d in entry["log_dirs"]:
            assert d["error_code"] == 0 and Path(d["log_dir"]).is_dir()
            for t in d["topics"]:
                for p in t["partitions"]:
                    seen[(t["name"], p["partition_index"])] = p["partition_size"]
    assert seen[("dirs", 0)] > 0 and seen[("dirs", 1)] > 0


# ------------------------------------------------------------------------------------------------ groups

def test_list_describe_and_delete_groups(cluster, kadmin, cadmin):
    _zk, brokers = cluster
    make_topic(brokers, "grp", partitions=2, messages=6)
    member = KafkaConsumer("grp", bootstrap_servers=brokers[0].bootstrap, group_id="admin-live",
                           auto_offset_reset="earliest", session_timeout_ms=6000)
    try:
        deadline = time.monotonic() + 30
        n = 0
        while n < 6 and time.monotonic() < deadline:
            n += sum(len(v) for v in member.poll(300).values())
        member.commit()
        kafka_consumer_commit(brokers, "admin-offsets-only", "grp")
        listed = {g["group_id"] for g in kadmin.list_groups()}
        assert {"admin-live", "admin-offsets-only"} <= listed
        clisted = {g.group_id for g in cadmin.list_consumer_groups().result(30).valid}
        assert {"admin-live", "admin-offsets-only"} <= clisted
        (desc,) = cadmin.describe_consumer_groups(["admin-live"]).values()
        d = desc.result(30)
        assert d.state.name == "STABLE" and len(d.members) == 1
        assert {tp.partition for tp in d.members[0].assignment.topic_partitions} == {0, 1}
        kdesc = kadmin.describe_groups(["admin-live"])["admin-live"]
        assert kdesc["group_state"] == "Stable" and kdesc["error"] is None and len(kdesc["members"]) == 1
        assert kadmin.list_group_offsets({"admin-offsets-only": None})["admin-offsets-only"][
            TopicPartition("grp", 0)].offset == 3
        offsets = cadmin.list_consumer_group_offsets([_group_req("admin-live")])
        (fut,) = offsets.values()
        committed = {tp.partition: tp.offset for tp in fut.result(30).topic_partitions}
        assert committed == {0: 3, 1: 3}
        (fut,) = cadmin.delete_consumer_groups(["admin-live"]).values()
        with pytest.raises(KafkaException) as e:
            fut.result(30)
        assert e.value.args[0].code() == 68  # NON_EMPTY_GROUP
    finally:
        member.close()
    (fut,) = cadmin.delete_consumer_groups(["admin-live"]).values()
    fut.result(30)
    kadmin.delete_groups(["admin-offsets-only"])
    listed = {g.group_id for g in cadmin.list_consumer_groups().result(30).valid}
    assert not {"admin-live", "admin-offsets-only"} & listed


def _group_req(group: str):
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group)


@pytest.mark.slow
def test_deleted_records_stay_deleted_after_a_restart(cluster_factory):
    cluster = cluster_factory(1, extra_args=("--flush-ms", "10"))
    (broker,) = cluster.brokers.values()
    make_topic([broker], "trim-restart", partitions=1, messages=10)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert admin.delete_records({TopicPartition("trim-restart", 0): 7})[
            TopicPartition("trim-restart", 0)]["low_watermark"] == 7
    finally:
        admin.close()
    broker.stop()
    broker.start()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        tp = TopicPartition("trim-restart", 0)
        assert c.beginning_offsets([tp])[tp] == 7 and c.end_offsets([tp])[tp] == 10
    finally:
        c.close()
