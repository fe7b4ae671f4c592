"""GroupCoordinator on its own (no broker process): the classic protocol's rules, with a real ZooKeeper for the
committed offsets. Each test runs one asyncio loop with timeouts of tens of milliseconds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from ferry.broker.server.group_coordinator import GroupCoordinator, GroupSettings, coordinator_for
from ferry.broker.server.group_coordinator_state import JoinResult
from ferry.wire.protocol.errors import ErrorCode as E
from ferry.wire.protocol.join_group import JoinGroupRequest
from ferry.wire.protocol.offset_commit import CommittedPartition, OffsetCommitRequest
from ferry.zk import connect
from ferry.zk.group_offsets import decode_group, encode_group, group_path
from ferry.zk.znodes import BrokerInfo, TopicInfo

pytestmark = pytest.mark.timeout(60)

SESSION_MS = 300
REBALANCE_MS = 400


class FakeMetadata:
    def __init__(self, brokers: list[int]) -> None:
        self.brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in brokers}
        self.topics = {"t": TopicInfo.from_assignment("t", {0: (1,), 1: (1,), 2: (1,)})}
        self.listeners: list[Callable] = []

    def add_brokers_listener(self, cb: Callable) -> None:
        self.listeners.append(cb)


@pytest.fixture
def zk(zk_connect):
    client = connect(zk_connect)
    yield client
    client.stop()
    client.close()


def run(zk, body: Callable[[GroupCoordinator], Awaitable[None]], brokers: list[int] | None = None,
        delay_ms: int = 0) -> None:
    async def main() -> None:
        meta = FakeMetadata(brokers or [1])
        with ThreadPoolExecutor(2) as pool:
            coord = GroupCoordinator(1, meta, lambda: zk, pool, GroupSettings(
                min_session_timeout_ms=10, initial_rebalance_delay_ms=delay_ms))
            coord.start(asyncio.get_running_loop())
            try:
                await body(coord)
            finally:
                coord.stop()

    asyncio.run(main())


def join_req(group: str = "g", member: str = "", protocols: list[tuple[str, bytes]] | None = None,
             instance: str | None = None, session_ms: int = SESSION_MS) -> JoinGroupRequest:
    return JoinGroupRequest(group, session_ms, REBALANCE_MS, member, instance, "consumer",
                            protocols or [("range", b"meta")])


async def join(coord: GroupCoordinator, req: JoinGroupRequest, version: int = 3) -> JoinResult:
    res = coord.join(req, version, "client", "")
    return await asyncio.wait_for(res, 5) if isinstance(res, asyncio.Future) else res


async def sync(coord, member: str, generation: int, assignments: dict[str, bytes] | None = None,
               group: str = "g") -> tuple[int, bytes]:
    res = coord.sync(group, generation, member, None, assignments or {})
    return await asyncio.wait_for(res, 5) if isinstance(res, asyncio.Future) else res


async def resolve(x):
    return await x if asyncio.isfuture(x) or asyncio.iscoroutine(x) else x


def test_placement_is_a_function_of_the_group_and_the_live_brokers():
    assert coordinator_for("g", []) is None
    assert coordinator_for("g", [3, 1, 2]) == coordinator_for("g", [1, 2, 3])
    spread = {coordinator_for(f"group-{i}", [1, 2, 3]) for i in range(50)}
    assert spread == {1, 2, 3}
    for name in ("a/b", ".", "..", "100%", "x y", "ü"):
        assert decode_group(encode_group(name)) == name and "/" not in encode_group(name)
        assert encode_group(name) not in (".", "..")
    assert group_path("a/b") == "/consumer_offsets/a%2Fb"


def test_one_member_joins_syncs_and_heartbeats(zk):
    async def body(coord: GroupCoordinator) -> None:
        first = coord.join(join_req(), 3, "client", "")
        assert isinstance(first, asyncio.Future) and first.done()  # no initial delay: formed at once
        first = first.result()
        assert first.error_code == E.NONE and first.generation_id == 1 and first.leader == first.member_id
        assert first.protocol_name == "range" and [m[0] for m in first.members] == [first.member_id]
        assert coord.groups["g"].state == "CompletingRebalance"
        assert coord.heartbeat("g", 1, first.member_id, None) == E.NONE
        assert await sync(coord, first.member_id, 1, {first.member_id: b"mine"}) == (E.NONE, b"mine")
        assert coord.groups["g"].state == "Stable"
        assert coord.heartbeat("g", 0, first.member_id, None) == E.ILLEGAL_GENERATION
        assert coord.heartbeat("g", 1, "nobody", None) == E.UNKNOWN_MEMBER_ID
        assert coord.heartbeat("other", 1, first.member_id, None) == E.UNKNOWN_MEMBER_ID
        assert (await sync(coord, first.member_id, 7))[0] == E.ILLEGAL_GENERATION

    run(zk, body)


def test_member_id_required_from_v4_and_bad_requests(zk):
    async def body(coord: GroupCoordinator) -> None:
        first = await join(coord, join_req(), version=4)
        assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
        again = await join(coord, join_req(member=first.member_id), version=4)
        assert again.error_code == E.NONE and again.member_id == first.member_id and again.generation_id == 1
        assert (await join(coord, join_req(member="stranger"))).error_code == E.UNKNOWN_MEMBER_ID
        assert (await join(coord, join_req(session_ms=1))).error_code == E.INVALID_SESSION_TIMEOUT
        assert (await join(coord, join_req(group=""))).error_code == E.INVALID_GROUP_ID
        assert (await join(coord, join_req(protocols=[("roundrobin", b"")]))).error_code == \
            E.INCONSISTENT_GROUP_PROTOCOL

    run(zk, body)


def test_second_member_triggers_a_rebalance_and_both_get_assignments(zk):
    async def body(coord: GroupCoordinator) -> None:
        a = await join(coord, join_req())
        await sync(coord, a.member_id, 1, {a.member_id: b"all"})
        pending_b = coord.join(join_req(protocols=[("roundrobin", b"rr"), ("range", b"b")]), 3, "client", "")
        assert isinstance(pending_b, asyncio.Future)
        assert coord.heartbeat("g", 1, a.member_id, None) == E.REBALANCE_IN_PROGRESS
        assert (await coord.commit(OffsetCommitRequest("g", 1, a.member_id, None, [
            ("t", [CommittedPartition(0, 5)])])))[0][1] == [(0, E.NONE)]  # allowed while preparing
        a2 = await join(coord, join_req(member=a.member_id))
        b = await asyncio.wait_for(pending_b, 5)
        assert a2.generation_id == b.generation_id == 2 and a2.leader == a.member_id
        assert a2.protocol_name == "range"  # the only protocol both support
        assert {m[0]: m[2] for m in a2.members} == {a.member_id: b"meta", b.member_id: b"b"} and b.members == []
        sync_b = coord.sync("g", 2, b.member_id, None, {})
        assert isinstance(sync_b, asyncio.Future) and not sync_b.done()
        commit = coord.commit(OffsetCommitRequest("g", 2, b.member_id, None, [("t", [CommittedPartition(1, 1)])]))
        assert commit == [("t", [(1, E.REBALANCE_IN_PROGRESS)])]
        assert await sync(coord, a.member_id, 2, {a.member_id: b"p0", b.member_id: b"p1"}) == (E.NONE, b"p0")
        assert await asyncio.wait_for(sync_b, 5) == (E.NONE, b"p1")

    run(zk, body)


def test_a_silent_member_is_expired_after_its_session_timeout(zk):
    async def body(coord: GroupCoordinator) -> None:
        a = await join(coord, join_req())
        pending_b = coord.join(join_req(), 3, "client", "")
        a2 = await join(coord, join_req(member=a.member_id))
        b = await asyncio.wait_for(pending_b, 5)
        await asyncio.gather(sync(coord, a.member_id, 2, {}), sync(coord, b.member_id, 2))
        # a heartbeats, b goes silent
        for _ in range(8):
            await asyncio.sleep(SESSION_MS / 4000)
            code = coord.heartbeat("g", a2.generation_id, a.member_id, None)
        assert code == E.REBALANCE_IN_PROGRESS and b.member_id not in coord.groups["g"].members
        a3 = await join(coord, join_req(member=a.member_id))
        assert a3.generation_id == 3 and [m[0] for m in a3.members] == [a.member_id]

    run(zk, body)


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(zk):
    async def body(coord: GroupCoordinator) -> None:
        a = await join(coord, join_req(session_ms=5000))
        await sync(coord, a.member_id, 1)
        b_join = coord.join(join_req(session_ms=5000), 3, "client", "")  # a never rejoins (but stays alive)
        b = await asyncio.wait_for(b_join, REBALANCE_MS / 1000 + 3)
        assert b.generation_id == 2 and b.leader == b.member_id and [m[0] for m in b.members] == [b.member_id]
        assert coord.heartbeat("g", 1, a.member_id, None) == E.UNKNOWN_MEMBER_ID

    run(zk, body)


def test_leave_rebalances_and_the_last_leave_empties_the_group(zk):
    async def body(coord: GroupCoordinator) -> None:
        a = await join(coord, join_req())
        pending_b = coord.join(join_req(), 3, "client", "")
        await join(coord, join_req(member=a.member_id))
        b = await asyncio.wait_for(pending_b, 5)
        assert coord.leave("g", [(b.member_id, None)]) == (E.NONE, [(b.member_id, None, E.NONE)])
        assert coord.heartbeat("g", 2, a.member_id, None) == E.REBALANCE_IN_PROGRESS
        assert coord.leave("g", [("ghost", None)])[1] == [("ghost", None, E.UNKNOWN_MEMBER_ID)]
        assert coord.leave("g", [(a.member_id, None)])[1][0][2] == E.NONE
        assert "g" not in coord.groups  # nothing left in memory (offsets would be in ZooKeeper)

    run(zk, body)


def test_static_member_restart_keeps_its_assignment_without_a_rebalance(zk):
    async def body(coord: GroupCoordinator) -> None:
        a = await join(coord, join_req(instance="host-a"))
        pending_b = coord.join(join_req(instance="host-b"), 3, "client", "")
        await join(coord, join_req(member=a.member_id, instance="host-a"))
        b = await asyncio.wait_for(pending_b, 5)
        await asyncio.gather(sync(coord, a.member_id, 2, {a.member_id: b"A", b.member_id: b"B"}),
                             sync(coord, b.member_id, 2))
        b_again = await join(coord, join_req(instance="host-b"))  # restarted: new member id, same instance
        assert b_again.error_code == E.NONE and b_again.generation_id == 2 and b_again.member_id != b.member_id
        assert await sync(coord, b_again.member_id, 2) == (E.NONE, b"B")
        assert coord.heartbeat("g", 2, b.member_id, "host-b") == E.FENCED_INSTANCE_ID
        assert coord.groups["g"].state == "Stable"
        assert coord.leave("g", [("", "host-b")])[1] == [(b_again.member_id, "host-b", E.NONE)]

    run(zk, body)


def test_not_coordinator_and_moving_away(zk):
    others = [g for g in (f"g{i}" for i in range(40)) if coordinator_for(g, [1, 2]) == 2]
    mine = next(g for g in (f"g{i}" for i in range(40)) if coordinator_for(g, [1, 2]) == 1)

    async def body(coord: GroupCoordinator) -> None:
        assert (await join(coord, join_req(group=others[0]))).error_code == E.NOT_COORDINATOR
        assert coord.heartbeat(others[0], 1, "m", None) == E.NOT_COORDINATOR
        a = await join(coord, join_req(group=mine))
        pending = coord.join(join_req(group=mine), 3, "client", "")
        coord._on_brokers({2})  # broker 1 is not live any more in this view: the group goes elsewhere
        assert (await asyncio.wait_for(pending, 5)).error_code == E.NOT_COORDINATOR
        assert mine not in coord.groups and a.member_id

    run(zk, body, brokers=[1, 2])


def test_offsets_commit_fetch_and_group_admin(zk):
    async def body(coord: GroupCoordinator) -> None:
        standalone = OffsetCommitRequest("solo", -1, "", None, [("t", [CommittedPartition(0, 42, 3, "meta"),
                                                                        CommittedPartition(9, 1)]),
                                                                ("nosuch", [CommittedPartition(0, 1)])])
        assert await resolve(coord.commit(standalone)) == [("t", [(0, E.NONE), (9, E.UNKNOWN_TOPIC_OR_PARTITION)]),
                                                           ("nosuch", [(0, E.UNKNOWN_TOPIC_OR_PARTITION)])]
        code, topics = await resolve(coord.fetch("solo", [("t", [0, 1])]))
        assert code == E.NONE
        (_, rows), = topics
        assert [(r.partition, r.offset, r.leader_epoch, r.metadata) for r in rows] == [(0, 42, 3, "meta"),
                                                                                      (1, -1, -1, "")]
        assert (await resolve(coord.fetch("solo", None)))[1][0][1][0].offset == 42
        # a member of a generation this coordinator never formed must rejoin
        stale = OffsetCommitRequest("solo", 5, "m-1", None, [("t", [CommittedPartition(0, 1)])])
        assert coord.commit(stale) == [("t", [(0, E.ILLEGAL_GENERATION)])]
        a = await join(coord, join_req(group="solo"))
        assert coord.commit(standalone)[0][1][0] == (0, E.UNKNOWN_MEMBER_ID)  # members now: no outsiders
        assert await coord.delete_groups(["solo", "never"]) == [("solo", E.NON_EMPTY_GROUP),
                                                                ("never", E.GROUP_ID_NOT_FOUND)]
        code, groups = await coord.list_groups()
        assert code == E.NONE and ("solo", "consumer", "CompletingRebalance") in groups
        described = await coord.describe_groups(["solo", "never"])
        assert [(d.group_id, d.state) for d in described] == [("solo", "CompletingRebalance"), ("never", "Dead")]
        coord.leave("solo", [(a.member_id, None)])
        described = await coord.describe_groups(["solo"])
        assert described[0].state == "Empty" and described[0].members == []
        assert await coord.delete_groups(["solo"]) == [("solo", E.NONE)]
        assert zk.exists(group_path("solo")) is None
        assert (await resolve(coord.fetch("solo", [("t", [0])])))[1][0][1][0].offset == -1

    run(zk, body)


def test_initial_delay_gathers_members_into_one_generation(zk):
    async def body(coord: GroupCoordinator) -> None:
        first = coord.join(join_req(), 3, "client", "")
        await asyncio.sleep(0.05)
        second = coord.join(join_req(), 3, "client", "")
        a, b = await asyncio.wait_for(asyncio.gather(first, second), 5)
        assert a.generation_id == b.generation_id == 1 and len(a.members) + len(b.members) == 2

    run(zk, body, delay_ms=200)


def test_committed_offsets_expire_as_kafkas_do(zk):
    """offsets.retention.minutes (KIP-211): an empty group's offsets go once the retention has passed since it was
    seen empty (and since their commit), then the group itself; a group with members keeps the offsets of the
    topics they subscribe to and loses those of other topics."""
    from ferry.wire.protocol.primitives import Writer
    from ferry.zk.group_offsets import fetch_offsets, now_ms

    subscription = Writer().int16(0).array_len(1).string("t").bytes_(None).getvalue()

    async def body(coord: GroupCoordinator) -> None:
        retention = coord.settings.offsets_retention_ms
        coord.metadata.topics["u"] = TopicInfo.from_assignment("u", {0: (1,)})
        for group in ("idle", "live"):
            standalone = OffsetCommitRequest(group, -1, "", None, [("t", [CommittedPartition(0, 7)]),
                                                                   ("u", [CommittedPartition(0, 3)])])
            assert all(c == E.NONE for _, ps in await resolve(coord.commit(standalone)) for _, c in ps)
        a = await join(coord, join_req(group="live", protocols=[("range", subscription)]))
        await sync(coord, a.member_id, a.generation_id, {a.member_id: b""}, group="live")
        start = now_ms() + 5  # after every commit above
        assert await coord.expire_offsets(start) == 0  # "idle" is seen empty from now on
        assert await coord.expire_offsets(start + retention - 1) == 1  # only "live"'s offset of u
        assert set(fetch_offsets(zk, "live")) == {("t", 0)}
        assert set(fetch_offsets(zk, "idle")) == {("t", 0), ("u", 0)}
        assert await coord.expire_offsets(start + retention) == 2
        assert zk.exists(group_path("idle")) is None
        code, groups = await coord.list_groups()
        assert code == E.NONE and [g[0] for g in groups] == ["live"]

    run(zk, body)
