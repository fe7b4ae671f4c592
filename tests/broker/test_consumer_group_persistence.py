"""KIP-848 groups outlive their coordinator: state saved in ZooKeeper (a real server) by one coordinator is
loaded by the next, so members keep their epochs and partitions; a coordinator that lost the group to another is
fenced from overwriting it; static members (group.instance.id) leave with epoch -2 and take their partitions back."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from kazoo.client import KazooClient

from ferry.broker.server.consumer_group_coordinator import ConsumerGroupCoordinator, ConsumerGroupSettings
from ferry.broker.server.consumer_group_persistence import ConsumerGroupPersistence
from ferry.broker.server.consumer_group_state import from_doc, to_doc
from ferry.broker.server.consumer_group_store import ConsumerGroupStore
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.wire.protocol.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from ferry.wire.protocol.errors import ErrorCode as E
from ferry.zk import connect
from ferry.zk.consumer_group_state import read_group_state
from ferry.zk.znodes import TopicInfo, new_topic_id


def cache(**topics: int) -> MetadataCache:
    m = MetadataCache()
    m.update_topics({t: TopicInfo.from_assignment(t, {p: (1,) for p in range(n)}, topic_id=new_topic_id())
                     for t, n in topics.items()})
    return m


class Member:
    """A member as a client drives it (epoch, owned partitions), against a coordinator or its persistence."""

    def __init__(self, target, member_id: str, topics: list[str], instance_id: str | None = None) -> None:
        self.target, self.member_id, self.topics, self.instance_id = target, member_id, topics, instance_id
        self.epoch = 0
        self.owned: list[tuple[bytes, list[int]]] = []
        self.assignments = 0  # answers that carried an assignment after joining (each one a change)

    async def beat(self, epoch: int | None = None) -> int:
        epoch = self.epoch if epoch is None else epoch
        req = ConsumerGroupHeartbeatRequest("g", self.member_id, epoch, instance_id=self.instance_id,
                                            subscribed_topic_names=self.topics if not epoch else None,
                                            owned=list(self.owned))
        answer = self.target.heartbeat(req, "c", "/h")
        code, _, member_id, new_epoch, assignment = answer if isinstance(answer, tuple) else await answer
        if code == E.NONE and epoch >= 0:
            self.member_id, self.epoch = member_id, new_epoch
            if assignment is not None:
                self.owned = assignment
                self.assignments += epoch != 0
        return code

    def partitions(self, metadata: MetadataCache) -> set[tuple[str, int]]:
        names = {info.topic_uuid: n for n, info in metadata.topics.items()}
        return {(names[t], p) for t, ps in self.owned for p in ps}


class SuccessiveCoordinators:
    """Coordinators (a ConsumerGroupCoordinator with its persistence) over one real ZooKeeper chroot, as brokers
    that coordinate the same group one after the other; `client` is the kazoo client they share, to read what
    they stored."""

    def __init__(self, client: KazooClient, executor: ThreadPoolExecutor) -> None:
        self.client, self.executor = client, executor

    def __call__(self, metadata: MetadataCache) -> ConsumerGroupPersistence:
        return ConsumerGroupPersistence(ConsumerGroupCoordinator(metadata),
                                        ConsumerGroupStore(lambda: self.client, self.executor))


@pytest.fixture
def coordinators(zk_connect: str) -> Iterator[SuccessiveCoordinators]:
    client = connect(zk_connect)
    executor = ThreadPoolExecutor(2)
    yield SuccessiveCoordinators(client, executor)
    executor.shutdown()
    client.stop()
    client.close()


async def _settle(*members: Member, rounds: int = 6) -> None:
    for _ in range(rounds):
        for m in members:
            assert await m.beat() == E.NONE


async def joined(target, *member_ids: str, static: dict[str, str] | None = None) -> list[Member]:
    """Members of group g subscribed to topic t through `target`, settled: each holds its share. `static`:
    member id -> group.instance.id."""
    members = [Member(target, m, ["t"], (static or {}).get(m)) for m in member_ids]
    await _settle(*members)
    return members


def test_state_document_round_trip():
    async def main() -> None:
        metadata = cache(t=6)
        coord = ConsumerGroupCoordinator(metadata)
        a, b = Member(coord, "a", ["t"], "ia"), Member(coord, "b", ["t"])
        await a.beat()
        await b.beat()
        await a.beat()  # a told to release three: mid-reconciliation is stored too
        group = coord.groups["g"]
        back = from_doc("g", to_doc(group))
        assert to_doc(back) == to_doc(group)
        assert (back.epoch, back.target_epoch, back.state) == (group.epoch, group.target_epoch, group.state)
        assert back.members["a"].revoking == group.members["a"].revoking and back.members["a"].instance_id == "ia"

    asyncio.run(main())


def test_a_new_coordinator_loads_the_group_and_members_keep_epochs_and_partitions(coordinators):
    async def main() -> None:
        metadata = cache(t=6)
        first = coordinators(metadata)
        a, b = await joined(first, "a", "b")
        owned_a, owned_b = a.partitions(metadata), b.partitions(metadata)
        assert len(owned_a) == len(owned_b) == 3 and not owned_a & owned_b
        stored, _ = read_group_state(coordinators.client, "g")
        assert stored is not None and set(stored["members"]) == {"a", "b"}
        first.unload(lambda gid: False)  # the broker stops

        second = coordinators(metadata)
        a.target = b.target = second
        epochs = (a.epoch, b.epoch)
        a.assignments = b.assignments = 0
        await _settle(a, b)
        assert (a.epoch, b.epoch) == epochs  # not fenced, no rejoin: the epochs carried over
        assert (a.partitions(metadata), b.partitions(metadata)) == (owned_a, owned_b)
        assert a.assignments == b.assignments == 0  # no new assignment was even sent: nothing changed for them

        # a third member joining the loaded group is reconciled as usual (the group epoch goes on from the stored)
        c = Member(second, "c", ["t"])
        await _settle(a, b, c, rounds=8)
        assert {len(m.partitions(metadata)) for m in (a, b, c)} == {2}
        assert c.epoch > max(epochs)

    asyncio.run(main())


def test_a_coordinator_that_lost_the_group_cannot_overwrite_it(coordinators):
    async def main() -> None:
        metadata = cache(t=2)
        old = coordinators(metadata)
        await joined(old, "a")
        new = coordinators(metadata)
        b = Member(new, "b", ["t"])
        await b.beat()  # the new coordinator loaded the group (with a) and wrote b's join
        stored_before, _ = read_group_state(coordinators.client, "g")
        late = Member(old, f"late-{uuid.uuid4().hex[:4]}", ["t"])
        assert await late.beat() == E.NOT_COORDINATOR  # the old coordinator's write is refused...
        assert "g" not in old._groups.groups  # ...and it dropped the group
        assert read_group_state(coordinators.client, "g")[0] == stored_before

    asyncio.run(main())


def test_static_member_leaves_with_minus_two_and_takes_its_partitions_back():
    async def main() -> None:
        metadata = cache(t=4)
        coord = ConsumerGroupCoordinator(metadata, ConsumerGroupSettings(session_timeout_ms=5_000))
        a, b = await joined(coord, "a1", "b", static={"a1": "A"})
        mine, group_epoch = a.partitions(metadata), coord.describe("g").group_epoch
        assert len(mine) == 2
        imposter = Member(coord, "a-imposter", ["t"], instance_id="A")
        assert await imposter.beat() == E.UNRELEASED_INSTANCE_ID  # A is still in use

        assert await a.beat(-2) == E.NONE  # a static leave: A's place and partitions wait for it
        await _settle(b)
        assert len(b.partitions(metadata)) == 2 and coord.describe("g").group_epoch == group_epoch
        restarted = Member(coord, "a2", ["t"], instance_id="A")
        assert await restarted.beat() == E.NONE
        assert restarted.partitions(metadata) == mine and restarted.epoch == a.epoch
        assert coord.describe("g").group_epoch == group_epoch  # nobody rebalanced
        assert [m.member_id for m in coord.describe("g").members] == ["b", "a2"]

        assert await restarted.beat(-1) == E.NONE  # a dynamic leave (-1) gives the partitions up
        await _settle(b)
        assert len(b.partitions(metadata)) == 4

    asyncio.run(main())
