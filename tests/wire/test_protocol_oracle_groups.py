"""The group coordinator's and the admin requests' codecs against kafka-python 3's (generated from Kafka's own
JSON message definitions): our responses decode there to every byte and re-encode identically, requests it
encodes parse here to the same values, for every non-flexible version we advertise (that kafka-python knows)."""

from __future__ import annotations

import pytest
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from ferry.wire.protocol import (
    alter_configs,
    create_partitions,
    delete_groups,
    delete_records,
    delete_topics,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_fetch,
    sync_group,
)
from ferry.wire.protocol.primitives import Reader
from tests.wire.flexible_oracle import flexible_body, flexible_roundtrip


def _same_after_roundtrip(cls, ours: bytes, version: int):
    decode = cls._struct.compiled_decode_from(version, compact=False, tagged=False, data_class=cls[None])
    decoded, end = decode(memoryview(ours), 0)
    assert end == len(ours), f"{cls.__name__} v{version}: {len(ours) - end} bytes left over"
    decoded._header = None
    assert bytes(decoded.encode(version=version)) == ours, f"{cls.__name__} v{version} re-encodes differently"
    return decoded


def _body(req, version: int) -> Reader:
    return Reader(bytes(req.encode(version=version)))


# ------------------------------------------------------------------------------------------------ group protocol

@pytest.mark.parametrize("version", range(0, 3))
def test_find_coordinator(version):
    kwargs = {"key_type": 0} if version >= 1 else {}
    r = _body(FindCoordinatorRequest(version=version, key="g", **kwargs), version)
    assert find_coordinator.parse_request(r, version) == find_coordinator.FindCoordinatorRequest("g", 0)
    d = _same_after_roundtrip(FindCoordinatorResponse, find_coordinator.encode_response(
        version, 0, 2, "host", 9093, "m" if version >= 1 else None), version)
    assert (d.error_code, d.node_id, d.host, d.port) == (0, 2, "host", 9093)


@pytest.mark.parametrize("version", range(0, 6))
def test_join_group(version):
    P = JoinGroupRequest.JoinGroupRequestProtocol
    kwargs = {"rebalance_timeout_ms": 9000} if version >= 1 else {}
    if version >= 5:
        kwargs["group_instance_id"] = "host-1"
    req = JoinGroupRequest(version=version, group_id="g", session_timeout_ms=6000, member_id="m",
                           protocol_type="consumer", protocols=[P(name="range", metadata=b"\x00\x01"),
                                                                P(name="roundrobin", metadata=b"")], **kwargs)
    r = _body(req, version)
    ours = join_group.parse_request(r, version)
    assert r.remaining() == 0
    assert (ours.group_id, ours.session_timeout_ms, ours.rebalance_timeout_ms, ours.member_id) == \
        ("g", 6000, 9000 if version >= 1 else 6000, "m")
    assert ours.group_instance_id == ("host-1" if version >= 5 else None)
    assert ours.protocols == [("range", b"\x00\x01"), ("roundrobin", b"")]
    resp = join_group.JoinGroupResponse(0, 3, "range", "m", "m", [("m", "host-1", b"meta"), ("n", None, b"")])
    d = _same_after_roundtrip(JoinGroupResponse, join_group.encode_response(version, resp), version)
    assert (d.generation_id, d.protocol_name, d.leader) == (3, "range", "m")
    assert [(m.member_id, m.metadata) for m in d.members] == [("m", b"meta"), ("n", b"")]


@pytest.mark.parametrize("version", range(0, 4))
def test_sync_group(version):
    A = SyncGroupRequest.SyncGroupRequestAssignment
    kwargs = {"group_instance_id": None} if version >= 3 else {}
    req = SyncGroupRequest(version=version, group_id="g", generation_id=4, member_id="m",
                           assignments=[A(member_id="m", assignment=b"a"), A(member_id="n", assignment=b"")],
                           **kwargs)
    r = _body(req, version)
    ours = sync_group.parse_request(r, version)
    assert r.remaining() == 0 and (ours.generation_id, ours.assignments) == (4, {"m": b"a", "n": b""})
    d = _same_after_roundtrip(SyncGroupResponse, sync_group.encode_response(version, 0, b"mine"), version)
    assert d.assignment == b"mine"


@pytest.mark.parametrize("version", range(0, 4))
def test_heartbeat_and_leave(version):
    kwargs = {"group_instance_id": "i"} if version >= 3 else {}
    r = _body(HeartbeatRequest(version=version, group_id="g", generation_id=2, member_id="m", **kwargs), version)
    assert heartbeat.parse_request(r, version) == heartbeat.HeartbeatRequest("g", 2, "m", kwargs.get("group_instance_id"))
    assert _same_after_roundtrip(HeartbeatResponse, heartbeat.encode_response(version, 27), version).error_code == 27
    if version >= 3:
        MI = LeaveGroupRequest.MemberIdentity
        req = LeaveGroupRequest(version=version, group_id="g", members=[MI(member_id="m", group_instance_id=None),
                                                                          MI(member_id="", group_instance_id="i")])
        members = [("m", None), ("", "i")]
    else:
        req = LeaveGroupRequest(version=version, group_id="g", member_id="m")
        members = [("m", None)]
    r = _body(req, version)
    assert leave_group.parse_request(r, version).members == members and r.remaining() == 0
    ours = leave_group.encode_response(version, 0, [("m", None, 0), ("x", "i", 25)])
    d = _same_after_roundtrip(LeaveGroupResponse, ours, version)
    if version >= 3:
        assert [(m.member_id, m.error_code) for m in d.members] == [("m", 0), ("x", 25)]


@pytest.mark.parametrize("version", range(2, 8))
def test_offset_commit(version):
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    kwargs = {"retention_time_ms": -1} if version <= 4 else {}
    if version >= 7:
        kwargs["group_instance_id"] = None
    pkw = {"committed_leader_epoch": 5} if version >= 6 else {}
    req = OffsetCommitRequest(version=version, group_id="g", generation_id_or_member_epoch=3, member_id="m", topics=[
        T(name="t", partitions=[P(partition_index=1, committed_offset=99, committed_metadata=None, **pkw),
                                P(partition_index=2, committed_offset=7, committed_metadata="x", **pkw)])], **kwargs)
    r = _body(req, version)
    ours = offset_commit.parse_request(r, version)
    assert r.remaining() == 0 and (ours.group_id, ours.generation_id, ours.member_id) == ("g", 3, "m")
    epoch = 5 if version >= 6 else -1
    assert ours.topics == [("t", [offset_commit.CommittedPartition(1, 99, epoch, None),
                                  offset_commit.CommittedPartition(2, 7, epoch, "x")])]
    d = _same_after_roundtrip(OffsetCommitResponse, offset_commit.encode_response(version, [("t", [(1, 0), (2, 22)])]),
                              version)
    assert [(p.partition_index, p.error_code) for p in d.topics[0].partitions] == [(1, 0), (2, 22)]


@pytest.mark.parametrize("version", range(1, 6))
def test_offset_fetch(version):
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    r = _body(OffsetFetchRequest(version=version, group_id="g", topics=[T(name="t", partition_indexes=[0, 3])]),
              version)
    ours = offset_fetch.parse_request(r, version)
    assert r.remaining() == 0 and ours.topics == [("t", [0, 3])]
    if version >= 2:
        assert offset_fetch.parse_request(_body(OffsetFetchRequest(version=version, group_id="g", topics=None),
                                                version), version).topics is None
    rows = [offset_fetch.FetchedOffset(0, 42, 3, "meta"), offset_fetch.FetchedOffset(3)]
    d = _same_after_roundtrip(OffsetFetchResponse, offset_fetch.encode_response(version, [("t", rows)], 0), version)
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in d.topics[0].partitions] == \
        [(0, 42, "meta"), (3, -1, "")]


@pytest.mark.parametrize("version", (3, 4))
def test_list_groups_flexible_with_states(version):
    """v3 is flexible; v4 lists each group's state and filters by the states asked for (KIP-518)."""
    kwargs = {"states_filter": ["stable"]} if version >= 4 else {}
    states = list_groups.parse_request(flexible_body(ListGroupsRequest(version=version, **kwargs), version), version)
    assert states == (frozenset({"stable"}) if version >= 4 else None)
    groups = [("a", "consumer", "Stable"), ("b", "consumer", "Empty")]
    d = flexible_roundtrip(ListGroupsResponse, list_groups.encode_response(version, 0, groups, states), version)
    want = [("a", "consumer", "Stable")] if version >= 4 else [("a", "consumer", ""), ("b", "consumer", "")]
    assert [(g.group_id, g.protocol_type, getattr(g, "group_state", None)) for g in d.groups] == want


@pytest.mark.parametrize("version", range(0, 5))
def test_list_describe_delete_groups(version):
    if version <= 2:
        list_groups.parse_request(_body(ListGroupsRequest(version=version), version), version)
        d = _same_after_roundtrip(ListGroupsResponse, list_groups.encode_response(
            version, 0, [("g", "consumer", "Stable")]), version)
        assert [(g.group_id, g.protocol_type) for g in d.groups] == [("g", "consumer")]
    if version <= 1:
        r = _body(DeleteGroupsRequest(version=version, groups_names=["a", "b"]), version)
        assert delete_groups.parse_request(r, version) == ["a", "b"]
        d = _same_after_roundtrip(DeleteGroupsResponse, delete_groups.encode_response(version, [("a", 0), ("b", 69)]),
                                  version)
        assert [(g.group_id, g.error_code) for g in d.results] == [("a", 0), ("b", 69)]
    kwargs = {"include_authorized_operations": True} if version >= 3 else {}
    r = _body(DescribeGroupsRequest(version=version, groups=["g"], **kwargs), version)
    assert describe_groups.parse_request(r, version).groups == ["g"] and r.remaining() == 0
    group = describe_groups.DescribedGroup(0, "g", "Stable", "consumer", "range", [
        describe_groups.DescribedMember("m", "i", "client", "/10.0.0.1", b"meta", b"assign")])
    d = _same_after_roundtrip(DescribeGroupsResponse, describe_groups.encode_response(version, [group]), version)
    g = d.groups[0]
    assert (g.group_state, g.protocol_data, g.members[0].member_assignment) == ("Stable", "range", b"assign")


# ------------------------------------------------------------------------------------------------ admin

@pytest.mark.parametrize("version", range(1, 3))
def test_describe_configs(version):
    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(version=version, resources=[R(resource_type=2, resource_name="t",
                                                               configuration_keys=None),
                                                             R(resource_type=4, resource_name="1",
                                                               configuration_keys=["a"])], include_synonyms=True)
    r = _body(req, version)
    ours = describe_configs.parse_request(r, version)
    assert r.remaining() == 0 and ours.include_synonyms
    assert [(x.resource_type, x.name, x.keys) for x in ours.resources] == [(2, "t", None), (4, "1", ["a"])]
    entries = [describe_configs.ConfigEntry("retention.ms", "1000", describe_configs.SOURCE_TOPIC,
                                            synonyms=[("retention.ms", "1000", 1), ("log.retention.ms", None, 5)]),
               describe_configs.ConfigEntry("segment.bytes", "1073741824", describe_configs.SOURCE_DEFAULT)]
    res = [describe_configs.ConfigResult(0, None, 2, "t", entries), describe_configs.ConfigResult(3, "no", 2, "x")]
    d = _same_after_roundtrip(DescribeConfigsResponse, describe_configs.encode_response(version, res), version)
    assert [(c.name, c.value, c.config_source) for c in d.results[0].configs] == \
        [("retention.ms", "1000", 1), ("segment.bytes", "1073741824", 5)]


@pytest.mark.parametrize("version", range(0, 2))
def test_alter_configs(version):
    R = AlterConfigsRequest.AlterConfigsResource
    req = AlterConfigsRequest(version=version, resources=[R(resource_type=2, resource_name="t", configs=[
        R.AlterableConfig(name="retention.ms", value="5")])], validate_only=False)
    r = _body(req, version)
    ours = alter_configs.parse_request(r, version)
    assert r.remaining() == 0 and ours.resources[0].configs == [("retention.ms", "5")]
    d = _same_after_roundtrip(AlterConfigsResponse, alter_configs.encode_response(version, [(40, "bad", 2, "t")]),
                              version)
    assert (d.responses[0].error_code, d.responses[0].error_message) == (40, "bad")


def test_incremental_alter_configs():
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(version=0, resources=[R(resource_type=2, resource_name="t", configs=[
        R.AlterableConfig(name="retention.ms", config_operation=0, value="5"),
        R.AlterableConfig(name="segment.ms", config_operation=1, value=None)])], validate_only=True)
    r = _body(req, 0)
    ours = incremental_alter_configs.parse_request(r, 0)
    assert r.remaining() == 0 and ours.validate_only
    assert ours.resources[0].configs == [incremental_alter_configs.AlterableConfig("retention.ms", 0, "5"),
                                         incremental_alter_configs.AlterableConfig("segment.ms", 1, None)]
    _same_after_roundtrip(IncrementalAlterConfigsResponse,
                          incremental_alter_configs.encode_response(0, [(0, None, 2, "t")]), 0)


@pytest.mark.parametrize("version", range(1, 4))
def test_delete_topics(version):
    r = _body(DeleteTopicsRequest(version=version, topic_names=["a", "b"], timeout_ms=500), version)
    assert delete_topics.parse_request(r, version) == delete_topics.DeleteTopicsRequest(["a", "b"], 500)
    d = _same_after_roundtrip(DeleteTopicsResponse, delete_topics.encode_response(version, [("a", 0), ("b", 3)]),
                              version)
    assert [(x.name, x.error_code) for x in d.responses] == [("a", 0), ("b", 3)]


@pytest.mark.parametrize("version", range(0, 2))
def test_create_partitions_and_delete_records(version):
    T = CreatePartitionsRequest.CreatePartitionsTopic
    req = CreatePartitionsRequest(version=version, topics=[
        T(name="t", count=4, assignments=None),
        T(name="u", count=2, assignments=[T.CreatePartitionsAssignment(broker_ids=[1, 2])])],
        timeout_ms=1000, validate_only=False)
    r = _body(req, version)
    ours = create_partitions.parse_request(r, version)
    assert r.remaining() == 0
    assert [(t.name, t.count, t.assignments) for t in ours.topics] == [("t", 4, None), ("u", 2, [[1, 2]])]
    _same_after_roundtrip(CreatePartitionsResponse, create_partitions.encode_response(version, [("t", 0, None)]),
                          version)
    DT = DeleteRecordsRequest.DeleteRecordsTopic
    req = DeleteRecordsRequest(version=version, topics=[DT(name="t", partitions=[
        DT.DeleteRecordsPartition(partition_index=0, offset=5)])], timeout_ms=100)
    r = _body(req, version)
    assert delete_records.parse_request(r, version) == delete_records.DeleteRecordsRequest([("t", [(0, 5)])], 100)
    d = _same_after_roundtrip(DeleteRecordsResponse, delete_records.encode_response(version, [("t", [(0, 5, 0)])]),
                              version)
    assert d.topics[0].partitions[0].low_watermark == 5


def test_describe_log_dirs():
    r = _body(DescribeLogDirsRequest(version=1, topics=None), 1)
    assert describe_log_dirs.parse_request(r, 1) is None
    res = [describe_log_dirs.LogDirResult(0, "/data", [("t", [(0, 100, 0)])])]
    d = _same_after_roundtrip(DescribeLogDirsResponse, describe_log_dirs.encode_response(1, res), 1)
    assert d.results[0].topics[0].partitions[0].partition_size == 100


def test_offset_fetch_v0_client_side():
    """The client's OffsetFetch v0 (a ZooKeeper group's offsets: `ferry mirror status --bootstrap-server`) is what
    the oracle encodes, and its answer parses back."""
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    key, version, parts = offset_fetch.encode_zookeeper_group_request("ferry-mirror", [("t", [0, 3])])
    assert (key, version) == (9, 0)
    assert b"".join(bytes(p) for p in parts) == bytes(OffsetFetchRequest(
        version=0, group_id="ferry-mirror", topics=[T(name="t", partition_indexes=[0, 3])]).encode(version=0))
    rows = [offset_fetch.FetchedOffset(0, 42, -1, ""), offset_fetch.FetchedOffset(3, error_code=16)]
    got = offset_fetch.parse_response(memoryview(offset_fetch.encode_response(0, [("t", rows)])), 0)
    assert [(r.partition, r.offset, r.error_code) for r in got["t"]] == [(0, 42, 0), (3, -1, 16)]
