"""KIP-848's coordinator rules, driven heartbeat by heartbeat on a real event loop: a partition is never given to
a member before its previous owner confirmed releasing it, epochs fence stale members, silent members expire,
and the server-side assignors balance (uniform) or range per topic."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

from ferry.broker.server.broker_config import BrokerConfig, ConfigError
from ferry.broker.server.consumer_group_assignors import Racks, range_, uniform
from ferry.broker.server.consumer_group_coordinator import ConsumerGroupCoordinator, ConsumerGroupSettings
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.wire.protocol.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from ferry.wire.protocol.consumer_protocol import parse_assignment, parse_subscription
from ferry.wire.protocol.errors import ErrorCode as E
from ferry.zk.znodes import BrokerInfo, TopicInfo, new_topic_id


def cache(**topics: int) -> MetadataCache:
    m = MetadataCache()
    m.update_topics({t: TopicInfo.from_assignment(t, {p: (1,) for p in range(n)}, topic_id=new_topic_id())
                     for t, n in topics.items()})
    return m


def run(body: Callable[[], None]) -> None:
    async def main() -> None:
        body()

    asyncio.run(main())


class Member:
    """A member as a client drives it: sends its epoch and what it owns, applies each assignment it gets."""

    def __init__(self, coord: ConsumerGroupCoordinator, member_id: str, topics: list[str],
                 assignor: str | None = None) -> None:
        self.coord, self.member_id, self.topics, self.assignor = coord, member_id, topics, assignor
        self.epoch = 0
        self.owned: list[tuple[bytes, list[int]]] = []

    def beat(self) -> tuple[int, str | None]:
        req = ConsumerGroupHeartbeatRequest("g", self.member_id, self.epoch, subscribed_topic_names=self.topics if not self.epoch
                               else None, server_assignor=self.assignor, owned=list(self.owned))
        code, message, _, epoch, assignment = self.coord.heartbeat(req, "c", "/h")
        if code == E.NONE:
            self.epoch = epoch
            if assignment is not None:
                self.owned = assignment
        return code, message

    def partitions(self) -> set[tuple[str, int]]:
        names = {info.topic_uuid: n for n, info in self.coord._metadata.topics.items()}
        return {(names[t], p) for t, ps in self.owned for p in ps}


def test_partitions_move_only_after_release():
    def body() -> None:
        coord = ConsumerGroupCoordinator(cache(t=6))
        a = Member(coord, "a", ["t"])
        assert a.beat() == (E.NONE, None) and len(a.partitions()) == 6
        b = Member(coord, "b", ["t"])
        b.beat()
        assert b.partitions() == set()  # a still owns everything
        a_epoch = a.epoch
        a.beat()  # told to give up three, keeps its epoch until it confirms
        assert len(a.partitions()) == 3 and a.epoch == a_epoch
        assert coord.describe("g").state == "Reconciling"
        b.beat()
        assert len(b.partitions()) == 0  # a has not confirmed yet
        a.beat()  # confirms (owned now 3): new epoch
        assert a.epoch > a_epoch
        b.beat()
        assert len(b.partitions()) == 3 and not a.partitions() & b.partitions()
        a.beat()
        b.beat()
        assert coord.describe("g").state == "Stable"
        described = coord.describe("g")
        assert {m.member_id: m.member_epoch for m in described.members} == {"a": a.epoch, "b": b.epoch}
        assert described.assignor_name == "uniform" and described.group_epoch == described.assignment_epoch
        classic = coord.classic_summary("g")  # what DescribeGroups shows classic tools
        assert (classic.state, classic.protocol_type, classic.protocol) == ("Stable", "consumer", "uniform")
        shown = {m.member_id: (parse_subscription(m.metadata), parse_assignment(m.assignment)) for m in classic.members}
        assert shown == {"a": (["t"], {"t": sorted(p for _, p in a.partitions())}),
                         "b": (["t"], {"t": sorted(p for _, p in b.partitions())})}

    run(body)


def test_epochs_fence_and_unknown_members():
    def body() -> None:
        coord = ConsumerGroupCoordinator(cache(t=2))
        a = Member(coord, "a", ["t"])
        a.beat()
        stale = ConsumerGroupHeartbeatRequest("g", "a", a.epoch + 5)
        assert coord.heartbeat(stale, "c", "/h")[0] == E.FENCED_MEMBER_EPOCH
        assert coord.heartbeat(ConsumerGroupHeartbeatRequest("g", "nobody", 3), "c", "/h")[0] == E.UNKNOWN_MEMBER_ID
        assert coord.commit_error("g", "a", a.epoch) == E.NONE
        assert coord.commit_error("g", "a", a.epoch - 1) == E.STALE_MEMBER_EPOCH
        assert coord.commit_error("g", "zz", a.epoch) == E.UNKNOWN_MEMBER_ID
        leave = coord.heartbeat(ConsumerGroupHeartbeatRequest("g", "a", -1), "c", "/h")
        assert (leave[0], leave[3]) == (E.NONE, -1) and not coord.has_members("g") and coord.describe("g") is None
        a = Member(coord, "a", ["t"])  # a lone member rejoining under its id (epoch 0) starts over in the group
        a.beat()
        a.epoch = 0
        assert a.beat() == (E.NONE, None) and len(a.partitions()) == 2 and coord.has_members("g")
        assert coord.heartbeat(ConsumerGroupHeartbeatRequest("g", "zz", -1), "c", "/h")[0] == E.NONE  # unknown: no-op
        b = Member(coord, "b", ["t"])
        b.beat()
        coord.unload(lambda gid: gid != "g")  # the group moved to another coordinator: b must rejoin there
        assert coord.heartbeat(ConsumerGroupHeartbeatRequest("g", "b", b.epoch), "c", "/h")[0] == E.UNKNOWN_MEMBER_ID

    run(body)


def test_bad_heartbeats_answered_with_errors():
    def body() -> None:
        coord = ConsumerGroupCoordinator(cache(t=2))
        hb = coord.heartbeat
        assert hb(ConsumerGroupHeartbeatRequest("", "m", 0, subscribed_topic_names=["t"]), "c", "/h")[0] == E.INVALID_REQUEST
        assert hb(ConsumerGroupHeartbeatRequest("g", "m", 0), "c", "/h")[0] == E.INVALID_REQUEST  # no subscription
        regex = ConsumerGroupHeartbeatRequest("g", "m", 0, subscribed_topic_regex="t(")
        assert hb(regex, "c", "/h")[0] == E.INVALID_REGULAR_EXPRESSION
        assert hb(ConsumerGroupHeartbeatRequest("g", "m", -3), "c", "/h")[0] == E.INVALID_REQUEST
        odd = ConsumerGroupHeartbeatRequest("g", "m", 0, subscribed_topic_names=["t"], server_assignor="sticky")
        assert hb(odd, "c", "/h")[0] == E.UNSUPPORTED_ASSIGNOR
        assert hb(ConsumerGroupHeartbeatRequest("g", "", 4), "c", "/h")[0] == E.INVALID_REQUEST

    run(body)


def test_silent_member_expires_and_its_partitions_move():
    async def main() -> None:
        coord = ConsumerGroupCoordinator(cache(t=4), ConsumerGroupSettings(session_timeout_ms=300))
        a, b = Member(coord, "a", ["t"]), Member(coord, "b", ["t"])
        for _ in range(4):
            a.beat()
            b.beat()
        assert len(a.partitions()) == len(b.partitions()) == 2
        for _ in range(40):  # b falls silent; a keeps beating (bounded: ~2 s)
            await asyncio.sleep(0.05)
            a.beat()
            if len(a.partitions()) == 4:
                break
        assert len(a.partitions()) == 4 and [m.member_id for m in coord.describe("g").members] == ["a"]

    asyncio.run(main())


def test_member_not_releasing_within_its_rebalance_timeout_is_removed():
    async def main() -> None:
        coord = ConsumerGroupCoordinator(cache(t=4))
        a = Member(coord, "a", ["t"])
        a.beat()
        slow = ConsumerGroupHeartbeatRequest("g", "a", a.epoch, rebalance_timeout_ms=200, owned=list(a.owned))
        coord.heartbeat(slow, "c", "/h")
        b = Member(coord, "b", ["t"])
        b.beat()
        code, _, _, _, told = coord.heartbeat(slow, "c", "/h")  # told to release two; keeps claiming all four
        assert code == E.NONE and told is not None and len(told[0][1]) == 2
        for _ in range(40):  # a never confirms; b keeps beating (bounded: ~2 s)
            await asyncio.sleep(0.05)
            b.beat()
            if len(b.partitions()) == 4:
                break
        assert len(b.partitions()) == 4 and not coord.describe("g").members[0].member_id == "a"

    asyncio.run(main())


def test_regex_subscription_follows_the_topics():
    def body() -> None:
        coord = ConsumerGroupCoordinator(cache(**{"cg.a": 2, "cg.b": 1, "other": 3}))
        req = ConsumerGroupHeartbeatRequest("g", "m", 0, subscribed_topic_regex=r"cg\..*")
        code, _, _, epoch, assignment = coord.heartbeat(req, "c", "/h")
        names = {info.topic_uuid: n for n, info in coord._metadata.topics.items()}
        assert code == E.NONE and {(names[t], p) for t, ps in assignment for p in ps} == \
            {("cg.a", 0), ("cg.a", 1), ("cg.b", 0)}
        meta = coord._metadata
        meta.update_topics({**meta.topics, "cg.c": TopicInfo.from_assignment("cg.c", {0: (1,)},
                                                                            topic_id=new_topic_id())})
        owned = [(meta.topics["cg.a"].topic_uuid, [0, 1]), (meta.topics["cg.b"].topic_uuid, [0])]
        code, _, _, _, assignment = coord.heartbeat(ConsumerGroupHeartbeatRequest("g", "m", epoch, owned=owned),
                                                    "c", "/h")
        assert {names.get(t, "cg.c") for t, _ in assignment} == {"cg.a", "cg.b", "cg.c"}
        assert coord.describe("g").members[0].subscribed_topic_regex == r"cg\..*"

    run(body)


def test_new_topic_partitions_reach_members():
    def body() -> None:
        coord = ConsumerGroupCoordinator(cache(t=2))
        a = Member(coord, "a", ["t", "later"])
        a.beat()
        assert a.partitions() == {("t", 0), ("t", 1)}
        meta = coord._metadata
        meta.update_topics({**meta.topics, "later": TopicInfo.from_assignment("later", {0: (1,)},
                                                                              topic_id=new_topic_id())})
        a.beat()
        assert a.partitions() == {("t", 0), ("t", 1), ("later", 0)}

    run(body)


def test_assignors():
    same = {m: frozenset({"t"}) for m in "abc"}
    u = uniform(same, {"t": 7}, {})
    assert sorted(len(v) for v in u.values()) == [2, 2, 3] and set().union(*u.values()) == {("t", p) for p in range(7)}
    # sticky: a fourth member takes partitions without moving the others' more than needed
    u4 = uniform({**same, "d": frozenset({"t"})}, {"t": 7}, u)
    assert sum(len(u[m] - u4[m]) for m in "abc") == 1 and sorted(len(v) for v in u4.values()) == [1, 2, 2, 2]
    mixed = uniform({"a": frozenset({"x", "y"}), "b": frozenset({"y"})}, {"x": 2, "y": 2}, {})
    assert mixed["b"] <= {("y", 0), ("y", 1)} and len(mixed["a"]) == len(mixed["b"]) == 2
    r = range_({"a": frozenset({"x", "y"}), "b": frozenset({"x", "y"})}, {"x": 3, "y": 3}, {})
    assert r == {"a": {("x", 0), ("x", 1), ("y", 0), ("y", 1)}, "b": {("x", 2), ("y", 2)}}


def test_range_is_rack_aware():
    """KIP-881's range: same quotas, but each member first takes the partitions with a replica in its rack."""
    subs = {"m1": frozenset({"t"}), "m2": frozenset({"t"})}
    where = {("t", 0): frozenset({"east"}), ("t", 1): frozenset({"east"}), ("t", 2): frozenset({"west"}),
             ("t", 3): frozenset({"west"})}
    plain = range_(subs, {"t": 4}, {})
    assert plain == {"m1": {("t", 0), ("t", 1)}, "m2": {("t", 2), ("t", 3)}}
    assert range_(subs, {"t": 4}, {}, Racks({"m1": "west", "m2": "east"}, where)) == {
        "m1": {("t", 2), ("t", 3)}, "m2": {("t", 0), ("t", 1)}}
    # quotas hold: both in the west, 3 partitions there of 5: m1 takes its 3 (its quota), m2 the rest
    five = {**where, ("t", 4): frozenset({"west"})}
    both_west = range_(subs, {"t": 5}, {}, Racks({"m1": "west", "m2": "west"}, five))
    assert both_west == {"m1": {("t", 2), ("t", 3), ("t", 4)}, "m2": {("t", 0), ("t", 1)}}
    assert range_(subs, {"t": 4}, {}, Racks({"m1": "north"}, where)) == plain  # no rack matches: plain ranges


def test_coordinator_gives_range_members_the_partitions_in_their_rack():
    """The racks come from the members' client.rack and the replicas' brokers' racks (their datacenters)."""
    def body() -> None:
        metadata = MetadataCache()
        metadata.update_brokers({1: BrokerInfo(1, "127.0.0.1", 9001, "east"), 2: BrokerInfo(2, "127.0.0.1", 9002, "west")})
        metadata.update_topics({"t": TopicInfo("t", {0: 1, 1: 1, 2: 2, 3: 2}, replicas={0: (1,), 1: (1,), 2: (2,), 3: (2,)},
                                               topic_id=new_topic_id())})
        coord = ConsumerGroupCoordinator(metadata)
        for member_id, rack in (("m1", "west"), ("m2", "east")):
            req = ConsumerGroupHeartbeatRequest("g", member_id, 0, rack_id=rack, subscribed_topic_names=["t"],
                                                server_assignor="range")
            assert coord.heartbeat(req, "c", "/h")[0] == E.NONE
        described = {m.member_id: m for m in coord.describe("g").members}
        assert [(p_t[1], sorted(p_t[2])) for p_t in described["m1"].target_assignment] == [("t", [2, 3])]
        assert [(p_t[1], sorted(p_t[2])) for p_t in described["m2"].target_assignment] == [("t", [0, 1])]
        assert described["m1"].rack_id == "west"

    run(body)


def test_broker_settings():
    """Kafka's property names; a session not longer than the heartbeat interval is refused, naming the setting."""
    base = {"broker.id": "1", "listeners": "127.0.0.1:9092", "log.dirs": "/tmp/d", "zookeeper.connect": "z:1/c",
            "datacenter": "live"}
    cfg = BrokerConfig.from_properties({**base, "group.consumer.heartbeat.interval.ms": "500",
                                        "group.consumer.session.timeout.ms": "6000"})
    assert (cfg.group_consumer_heartbeat_interval_ms, cfg.group_consumer_session_timeout_ms) == (500, 6000)
    default = BrokerConfig.from_properties(base)
    assert (default.group_consumer_heartbeat_interval_ms, default.group_consumer_session_timeout_ms) == (5000, 45000)
    with pytest.raises(ConfigError, match=re.escape("group.consumer.session.timeout.ms: 1000 must be at least 5001")):
        BrokerConfig.from_properties({**base, "group.consumer.session.timeout.ms": "1000"})
    with pytest.raises(ConfigError, match="group.consumer.heartbeat.interval.ms: 0 must be at least 1"):
        BrokerConfig.from_properties({**base, "group.consumer.heartbeat.interval.ms": "0"})
