"""KIP-848's consumer group protocol served to librdkafka (confluent-kafka, group.protocol=consumer): members
split the partitions, hand them over on a member's departure, resume from committed offsets, and the group is
described as a consumer group (docs/groups.md)."""

from __future__ import annotations

import base64
import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from ferry.wire.protocol import flexible
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Reader, Writer
from tests.broker.broker_wire import METADATA, WireClient
from tests.conftest import Cluster
from tests.wire.flexible_oracle import flexible_roundtrip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "cgh"
CONSUMER_GROUP_HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("kip848"), f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}/live", "live")
    c.add_broker(extra_args=("--override", "group.consumer.heartbeat.interval.ms=500", "--override",
                             "group.consumer.session.timeout.ms=6000", "--flush-ms", "10"))
    deadline = time.monotonic() + 30
    while AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=10).controller_id < 0:
        assert time.monotonic() < deadline, "no controller"  # (an admin client that saw none waits for long)
        time.sleep(0.2)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 6, 1)])[TOPIC].result(30)
    while not all(p.leader >= 0 for p in admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.values()):
        assert time.monotonic() < deadline, "no leaders"
        time.sleep(0.2)
    yield c
    c.stop()


def consumer(cluster: Cluster, group: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra})


def produce(cluster: Cluster, n: int, tag: str) -> set[bytes]:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    values = {f"{tag}-{i}".encode() for i in range(n)}
    for i, v in enumerate(sorted(values)):
        p.produce(TOPIC, v, partition=i % 6)
    assert p.flush(30) == 0
    return values


def poll_until(consumers: list[Consumer], done, timeout: float = 45) -> dict[int, list]:
    """Poll every consumer in turn until ``done(received)``; received: consumer index -> messages."""
    received: dict[int, list] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while not done(received):
        assert time.monotonic() < deadline, f"timed out: {[(i, len(v)) for i, v in received.items()]}, " \
                                            f"assignments {[sorted(c.assignment()) for c in consumers]}"
        for i, c in enumerate(consumers):
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                received[i].append(m)
    return received


def owned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_two_members_split_six_partitions_hand_over_and_resume(cluster):
    """The bar: 2 members split 6 partitions (no overlap, all covered), consume and commit; one closes and the
    other gets all 6; a restarted member resumes from the committed offsets."""
    group = "g-split"
    first = produce(cluster, 60, "a")
    a, b = consumer(cluster, group), consumer(cluster, group)
    a.subscribe([TOPIC])
    b.subscribe([TOPIC])
    try:
        got = poll_until([a, b], lambda r: {m.value() for ms in r.values() for m in ms} >= first
                         and len(owned(a)) == 3 and len(owned(b)) == 3)
        assert owned(a) | owned(b) == set(range(6)) and not owned(a) & owned(b)
        split = produce(cluster, 60, "a2")  # once split: each member reads its own partitions, each record once
        got = poll_until([a, b], lambda r: {m.value() for ms in r.values() for m in ms} >= split)
        assert {m.partition() for m in got[0]} <= owned(a) and {m.partition() for m in got[1]} <= owned(b)
        assert sorted(m.value() for ms in got.values() for m in ms) == sorted(split)
        a.commit(asynchronous=False)
        b.commit(asynchronous=False)
        b.close()
        poll_until([a], lambda r: len(owned(a)) == 6, timeout=30)
        second = produce(cluster, 30, "b")
        got = poll_until([a], lambda r: {m.value() for m in r[0]} >= second)
        assert not {m.value() for m in got[0]} & (first | split)  # b's committed partitions are not read again
        a.commit(asynchronous=False)
    finally:
        a.close()
    third = produce(cluster, 12, "c")
    c = consumer(cluster, group)
    c.subscribe([TOPIC])
    try:
        got = poll_until([c], lambda r: {m.value() for m in r[0]} >= third)
        assert {m.value() for m in got[0]} == third  # resumed from the commits: nothing older again
        assert owned(c) == set(range(6))
    finally:
        c.close()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}
    assert (listed[group].state.name, listed[group].is_simple_consumer_group) == ("EMPTY", False)  # offsets kept


def test_described_as_consumer_group_with_range_assignor(cluster):
    """describe_consumer_groups (ConsumerGroupDescribe) shows type consumer, state, members and their partitions;
    group.remote.assignor=range gives each member a contiguous range."""
    group = "g-range"
    a, b = consumer(cluster, group, **{"group.remote.assignor": "range"}), \
        consumer(cluster, group, **{"group.remote.assignor": "range"})
    a.subscribe([TOPIC])
    b.subscribe([TOPIC])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    try:
        poll_until([a, b], lambda r: len(owned(a)) == 3 and len(owned(b)) == 3)
        assert sorted([sorted(owned(a)), sorted(owned(b))]) == [[0, 1, 2], [3, 4, 5]]
        deadline = time.monotonic() + 30
        while True:  # Stable once both members confirmed their assignments
            d = admin.describe_consumer_groups([group])[group].result(10)
            if d.state.name == "STABLE" or time.monotonic() > deadline:
                break
            for c in (a, b):
                c.poll(0.2)
        assert (d.type.name, d.state.name, d.partition_assignor) == ("CONSUMER", "STABLE", "range")
        described = {m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in d.members}
        assert sorted(described.values(), key=min) == [{0, 1, 2}, {3, 4, 5}]
        assert {m.client_id for m in d.members} == {"rdkafka"}
        k = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
        try:  # DescribeGroups (kafka-python has no ConsumerGroupDescribe): members in the consumer protocol
            kd = k.describe_groups([group])[group]
        finally:
            k.close()
        assert (kd["error"], kd["group_state"], kd["protocol_type"], kd["protocol_data"]) == \
            (None, "Stable", "consumer", "range")
        shown = sorted(sorted(p for tp in m["member_assignment"]["assigned_partitions"] for p in tp["partitions"])
                       for m in kd["members"])
        assert shown == [[0, 1, 2], [3, 4, 5]] and all(m["member_metadata"]["topics"] == [TOPIC]
                                                       for m in kd["members"])
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}  # ListGroups v5
        assert (listed[group].type.name, listed[group].state.name) == ("CONSUMER", "STABLE")
        with pytest.raises(KafkaException) as refused:  # a live consumer group keeps its offsets
            admin.delete_consumer_groups([group])[group].result(10)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        a.close()
        b.close()


def test_classic_member_refused_from_a_consumer_group_and_classic_groups_still_described(cluster):
    """A group is of one protocol at a time: a classic JoinGroup to a live consumer group is answered
    INCONSISTENT_GROUP_PROTOCOL; describing a classic group still works (librdkafka falls back)."""
    a = consumer(cluster, "g-mixed")
    a.subscribe([TOPIC])
    classic = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-mixed", "group.protocol": "classic"})
    other = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-classic", "group.protocol": "classic",
                      "auto.offset.reset": "earliest"})
    try:
        poll_until([a], lambda r: len(owned(a)) == 6)
        classic.subscribe([TOPIC])
        other.subscribe([TOPIC])
        error = None
        deadline = time.monotonic() + 30
        while error is None and time.monotonic() < deadline:
            m = classic.poll(0.3)
            other.poll(0.1)
            a.poll(0.1)
            if m is not None and m.error():
                error = m.error()
        assert error is not None and error.code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL, error
        assert owned(a) == set(range(6))  # the consumer group is untouched
        poll_until([other], lambda r: len(owned(other)) == 6)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept: the futures need their client
        described = admin.describe_consumer_groups(["g-classic"])["g-classic"].result(10)
        assert (described.type.name, described.state.name, len(described.members)) == ("CLASSIC", "STABLE", 1)
    finally:
        for c in (a, classic, other):
            c.close()


def test_regex_subscription(cluster):
    """subscribe(["^cgr.*"]): librdkafka sends the regex (v1) and the coordinator matches it against the topics,
    a topic created later included."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for name, n in (("cgr1", 2), ("cgr2", 1)):
        admin.create_topics([NewTopic(name, n, 1)])[name].result(30)
    a = consumer(cluster, "g-regex", **{"topic.metadata.refresh.interval.ms": 1000})
    a.subscribe(["^cgr.*"])
    try:
        poll_until([a], lambda r: {(tp.topic, tp.partition) for tp in a.assignment()} ==
                   {("cgr1", 0), ("cgr1", 1), ("cgr2", 0)})
        admin.create_topics([NewTopic("cgr3", 1, 1)])["cgr3"].result(30)
        poll_until([a], lambda r: ("cgr3", 0) in {(tp.topic, tp.partition) for tp in a.assignment()})
    finally:
        a.close()


def _hb_frame(client: WireClient, version: int, body: bytes) -> int:
    return client.send(CONSUMER_GROUP_HEARTBEAT, version, b"\0" + body)  # request header v2's tagged fields


def _hb_body(group: str, member: str, epoch: int, topics: list[str] | None, regex: bool = False) -> bytes:
    w = Writer()
    flexible.put_compact_string(w, group)
    flexible.put_compact_string(w, member)
    w.int32(epoch)
    flexible.put_compact_string(w, None)
    flexible.put_compact_string(w, None)
    w.int32(-1)
    flexible.put_compact_array(w, topics, flexible.put_compact_string)
    flexible.put_compact_string(w, "cg(" if regex else None)  # v1's regex (this one does not compile)
    flexible.put_compact_string(w, None)
    flexible.put_compact_array(w, None, lambda w, x: None)
    flexible.put_tagged_fields(w)
    return bytes(w.buf)


def _hb_answer(r: Reader) -> tuple[int, str | None, str | None, int]:
    flexible.skip_tagged_fields(r)
    r.int32()
    return r.int16(), flexible.compact_nullable_string(r), flexible.compact_nullable_string(r), r.int32()


def test_bad_heartbeats_get_errors_never_a_hang(cluster):
    """Each bad heartbeat is answered with its Kafka error at once; a truncated one closes the connection."""
    address = cluster.bootstrap.split(",")[0]
    with WireClient(address) as c:
        c.sock.settimeout(10)
        assert _hb_answer(c.request(CONSUMER_GROUP_HEARTBEAT, 1, b"\0" + _hb_body("g-bad", "m1", 0, None, True)))[0] \
            == ErrorCode.INVALID_REGULAR_EXPRESSION
        assert _hb_answer(c.request(CONSUMER_GROUP_HEARTBEAT, 1, b"\0" + _hb_body("", "m1", 0, [TOPIC])))[0] \
            == ErrorCode.INVALID_GROUP_ID
        assert _hb_answer(c.request(CONSUMER_GROUP_HEARTBEAT, 1, b"\0" + _hb_body("g-bad", "ghost", 7, None)))[0] \
            == ErrorCode.UNKNOWN_MEMBER_ID
        code, _, member, epoch = _hb_answer(c.request(CONSUMER_GROUP_HEARTBEAT, 1,
                                                      b"\0" + _hb_body("g-bad", "m1", 0, [TOPIC])))
        assert (code, member) == (ErrorCode.NONE, "m1") and epoch > 0
        assert _hb_answer(c.request(CONSUMER_GROUP_HEARTBEAT, 1, b"\0" + _hb_body("g-bad", "m1", epoch + 3, None)))[0] \
            == ErrorCode.FENCED_MEMBER_EPOCH
        assert _hb_answer(c.request(CONSUMER_GROUP_HEARTBEAT, 1, b"\0" + _hb_body("g-bad", "m1", -1, None)))[::3] \
            == (ErrorCode.NONE, -1)
        _hb_frame(c, 1, _hb_body("g-bad", "m1", 0, [TOPIC])[:9])
        assert c.closed_by_peer(10)


def test_topic_ids_stable_in_zookeeper_and_metadata_by_id(cluster, zk_server):
    """The topic id is drawn once, kept in /brokers/topics/<t> as Kafka keeps it, answered in Metadata v10+, and
    a Metadata v12 request naming the topic by id alone gets its name; an unknown id gets UNKNOWN_TOPIC_ID."""
    from kazoo.client import KazooClient
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=15)
    try:
        stored = json.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])["topic_id"]
    finally:
        zk.stop()
        zk.close()
    topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(stored + "=="))
    with WireClient(cluster.bootstrap.split(",")[0]) as c:
        asked = MetadataRequest(version=12, topics=[MetadataRequest.MetadataRequestTopic(topic_id=topic_id, name=None),
                                                    MetadataRequest.MetadataRequestTopic(topic_id=uuid.uuid4(),
                                                                                         name=None)])
        r = c.request(METADATA, 12, b"\0" + bytes(asked.encode(version=12)))
        answer = flexible_roundtrip(MetadataResponse, bytes(r.buf[r.pos:]), 12)
        by_name = MetadataRequest(version=10, topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)])
        r = c.request(METADATA, 10, b"\0" + bytes(by_name.encode(version=10)))
        named = flexible_roundtrip(MetadataResponse, bytes(r.buf[r.pos:]), 10)
    assert [(t.name, t.topic_id, t.error_code) for t in answer.topics][0] == (TOPIC, topic_id, 0)
    assert (answer.topics[1].name, answer.topics[1].error_code) == (None, ErrorCode.UNKNOWN_TOPIC_ID)
    assert (named.topics[0].topic_id, len(named.topics[0].partitions)) == (topic_id, 6)


def test_static_member_restarted_gets_its_partitions_back(cluster):
    """group.instance.id: a static member's close leaves with epoch -2, so its partitions wait for it (the other
    member does not take them) and, restarted with the same instance id, it gets the same partitions back."""
    group = f"g-static-{uuid.uuid4().hex[:6]}"
    a, b = consumer(cluster, group, **{"group.instance.id": "static-a"}), consumer(cluster, group)
    a.subscribe([TOPIC])
    b.subscribe([TOPIC])
    try:
        poll_until([a, b], lambda r: len(owned(a)) == 3 and len(owned(b)) == 3)
        mine, theirs = owned(a), owned(b)
        a.close()
        time.sleep(1.5)  # three of b's heartbeats (500 ms): a's partitions are not offered to b
        poll_until([b], lambda r: True)
        assert owned(b) == theirs
        a = consumer(cluster, group, **{"group.instance.id": "static-a"})
        a.subscribe([TOPIC])
        poll_until([a, b], lambda r: len(owned(a)) == 3, timeout=20)
        assert owned(a) == mine and owned(b) == theirs
    finally:
        a.close()
        b.close()


def test_members_keep_their_partitions_when_the_coordinator_restarts(cluster):
    """The group's state is in ZooKeeper: after its coordinator's broker restarts, the members are not fenced and
    keep their partitions (no revocation, nothing lost), and go on consuming (runs last: it restarts the module's
    broker)."""
    group = "g-restart"
    before = produce(cluster, 30, "r1")
    events: list[tuple[str, str]] = []

    def member(name: str) -> Consumer:
        c = consumer(cluster, group)
        c.subscribe([TOPIC], on_revoke=lambda _c, ps: ps and events.append((name, "revoke")),
                    on_lost=lambda _c, ps: events.append((name, "lost")))
        return c

    a, b = member("a"), member("b")
    try:
        got = poll_until([a, b], lambda r: {m.value() for ms in r.values() for m in ms} >= before
                         and len(owned(a)) == 3 and len(owned(b)) == 3)
        seen = {m.value() for ms in got.values() for m in ms}
        a.commit(asynchronous=False)
        b.commit(asynchronous=False)
        mine, theirs = owned(a), owned(b)
        events.clear()
        broker = next(iter(cluster.brokers.values()))
        ids = {a.memberid(): mine, b.memberid(): theirs}
        broker.stop()
        broker.start()
        # described straight away (the group is read from ZooKeeper if no member's heartbeat did it yet)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        d = admin.describe_consumer_groups([group])[group].result(30)
        assert {m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in d.members} == ids
        after = produce(cluster, 30, "r2")
        got = poll_until([a, b], lambda r: {m.value() for ms in r.values() for m in ms} >= after, timeout=60)
        values = [m.value() for ms in got.values() for m in ms]
        assert sorted(values) == sorted(after) and not set(values) & seen  # each once, nothing committed again
        a.commit(asynchronous=False)  # commits with the carried-over epochs are accepted
        b.commit(asynchronous=False)
        assert (owned(a), owned(b)) == (mine, theirs) and events == []
    finally:
        a.close()
        b.close()
