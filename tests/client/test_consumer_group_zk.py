"""Algorithm 1 against a real ZooKeeper: registration, ownership, rebalances, collisions, session loss.

No broker runs here: topics are registered straight in ZooKeeper, and with no broker registered the
fetcher stays idle, so these tests see the coordination alone.
"""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient

from ferry.client import group_dirs as dirs
from ferry.client.consumer_connector import ConsumerConnector
from ferry.client.errors import ClientError
from ferry.client.group_store import read_offsets
from tests.client.group_helpers import by_owner, members, owners, wait_until, write_topic, zk_client

ALL12 = {("events", p) for p in range(12)}


def _connector(zk_connect: str, group: str = "g", **kw) -> ConsumerConnector:
    kw.setdefault("rebalance_backoff_s", 0.2)
    kw.setdefault("zk_session_timeout_s", 4.0)
    return ConsumerConnector(group, zk_connect, **kw)


def _balanced(zk, group, consumers, expected=ALL12):
    o = owners(zk, group)
    if set(o) != expected:
        return False
    for c in consumers:
        if c.owned_partitions() != {k for k, v in o.items() if v == c.consumer_id}:
            return False
    return o


@pytest.fixture
def zk(zk_connect):
    client = zk_client(zk_connect)
    yield client
    client.stop()
    client.close()


def test_three_consumers_split_twelve_partitions_and_survive_a_crash(zk_connect, zk):
    write_topic(zk, "events", 12)
    cs = [_connector(zk_connect, consumer_id=f"c{i}") for i in range(3)]
    try:
        for c in cs:
            c.create_message_streams({"events": 2})
        o = wait_until(lambda: _balanced(zk, "g", cs), what="3-way split")
        assert by_owner(o) == {"c0": [0, 1, 2, 3], "c1": [4, 5, 6, 7], "c2": [8, 9, 10, 11]}
        assert members(zk, "g") == ["c0", "c1", "c2"]

        # c1 crashes: its session ends without any cleanup of its own
        cs[1]._zk.stop()
        survivors = [cs[0], cs[2]]
        o = wait_until(lambda: _balanced(zk, "g", survivors), timeout=10, what="2-way split after a crash")
        assert by_owner(o) == {"c0": list(range(6)), "c2": list(range(6, 12))}
    finally:
        for c in cs:
            c.shutdown()
    # a clean shutdown leaves nothing ephemeral behind
    assert owners(zk, "g") == {}
    assert members(zk, "g") == []


def test_a_new_member_takes_its_share_and_a_leaving_one_gives_it_back(zk_connect, zk):
    write_topic(zk, "events", 12)
    a = _connector(zk_connect, consumer_id="a")
    a.create_message_streams({"events": 1})
    try:
        wait_until(lambda: _balanced(zk, "g", [a]), what="a owns all")
        b = _connector(zk_connect, consumer_id="b")
        b.create_message_streams({"events": 1})
        o = wait_until(lambda: _balanced(zk, "g", [a, b]), what="a/b split")
        assert by_owner(o) == {"a": list(range(6)), "b": list(range(6, 12))}
        b.shutdown()
        o = wait_until(lambda: _balanced(zk, "g", [a]), what="a owns all again")
    finally:
        a.shutdown()


def test_new_partitions_and_new_topics_are_picked_up_by_the_watches(zk_connect, zk):
    write_topic(zk, "t1", 2)
    c = _connector(zk_connect, consumer_id="solo")
    c.create_message_streams_by_filter(r"t\d+", exclude="t9")
    try:
        wait_until(lambda: c.owned_partitions() == {("t1", 0), ("t1", 1)}, what="t1 owned")
        write_topic(zk, "t2", 3)
        write_topic(zk, "t9", 1)  # excluded
        write_topic(zk, "__t3", 1)  # internal topics are never matched by a pattern
        want = {("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)}
        wait_until(lambda: c.owned_partitions() == want, what="new topic picked up")
        # partitions added to an existing topic
        from ferry.zk import TopicInfo

        zk.set("/brokers/topics/t1", TopicInfo.from_assignment("t1", {0: (1,), 1: (1,), 2: (1,)}).encode())
        wait_until(lambda: ("t1", 2) in c.owned_partitions(), what="added partition picked up")
        assert set(owners(zk, "g")) == want | {("t1", 2)}
    finally:
        c.shutdown()


def test_a_claim_that_collides_backs_off_until_the_other_owner_is_gone(zk_connect, zk):
    write_topic(zk, "events", 4)
    ghost = KazooClient(hosts=zk_connect, timeout=4)
    ghost.start(timeout=10)
    ghost.create(dirs.owner_path("g", "events", 2), b"ghost", ephemeral=True, makepath=True)
    c = _connector(zk_connect, consumer_id="c", max_rebalance_retries=2)
    try:
        c.create_message_streams({"events": 1}, wait_s=1.0)
        # all or nothing: the member holds no partition while one of its share is someone else's
        wait_until(lambda: owners(zk, "g") == {("events", 2): "ghost"}, what="claims released after collision")
        assert c.owned_partitions() == set()
        ghost.stop()
        ghost.close()
        wait_until(lambda: len(c.owned_partitions()) == 4, timeout=15, what="claims after the ghost left")
        assert set(owners(zk, "g").values()) == {"c"}
    finally:
        c.shutdown()


def test_session_expiry_re_registers_and_reclaims(zk_connect, zk):
    write_topic(zk, "events", 3)
    c = _connector(zk_connect, consumer_id="c")
    c.create_message_streams({"events": 1})
    try:
        wait_until(lambda: len(owners(zk, "g")) == 3, what="owned")
        # expire c's session from the outside: a second client with the same session id closes it
        session_id, password = c._zk.client_id
        hosts = zk_connect.split("/", 1)[0]
        twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=4)
        twin.start(timeout=10)
        twin.stop()
        twin.close()
        wait_until(lambda: c._zk.client_id and c._zk.client_id[0] != session_id, timeout=20, what="a new session")
        wait_until(lambda: len(owners(zk, "g")) == 3 and c.owned_partitions() == {("events", p) for p in range(3)},
                   timeout=20, what="reclaimed after expiry")
        assert members(zk, "g") == ["c"]
    finally:
        c.shutdown()


def test_commit_offsets_only_for_owned_partitions(zk_connect, zk):
    write_topic(zk, "events", 2)
    c = _connector(zk_connect, consumer_id="c", auto_commit=False)
    c.create_message_streams({"events": 1})
    try:
        wait_until(lambda: len(c.owned_partitions()) == 2, what="owned")
        done = c.commit_offsets({("events", 0): 42, ("events", 1): 7, ("other", 0): 5})
        assert done == {("events", 0): 42, ("events", 1): 7}
        assert read_offsets(zk, "g") == {("events", 0): 42, ("events", 1): 7}
    finally:
        c.shutdown()
    # auto_commit=False: shutdown does not commit anything on its own
    assert read_offsets(zk, "g") == {("events", 0): 42, ("events", 1): 7}


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_a_duplicate_consumer_id_is_refused(zk_connect, zk):
    write_topic(zk, "events", 1)
    a = _connector(zk_connect, consumer_id="same")
    a.create_message_streams({"events": 1})
    b = _connector(zk_connect, consumer_id="same")
    try:
        # the holder is this very process (no pid to tell it from a killed one): refused once it outlives the
        # session timeout, naming where it runs
        with pytest.raises(ClientError, match=r"'same' is held in group '.*' by a live member at \S+ \(pid \d+\)"):
            b.create_message_streams({"events": 1})
    finally:
        b.shutdown()
        a.shutdown()


def test_bad_arguments_fail_clearly(zk_connect):
    with pytest.raises(ValueError, match="auto_offset_reset"):
        ConsumerConnector("g", zk_connect, auto_offset_reset="middle")
    with pytest.raises(ValueError, match="group"):
        ConsumerConnector("a/b", zk_connect)
    c = _connector(zk_connect)
    try:
        with pytest.raises(ValueError, match="positive"):
            c.create_message_streams({"events": 0})
        with pytest.raises(ValueError, match="bad topic pattern"):
            c.create_message_streams_by_filter("(")
    finally:
        c.shutdown()


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_a_member_cut_off_from_zookeeper_pauses_and_resumes(zk_connect, zk):
    from tests.client.group_helpers import TcpProxy

    write_topic(zk, "events", 2)
    hosts, _, chroot = zk_connect.partition("/")
    host, port = hosts.split(":")
    proxy = TcpProxy(host, int(port))
    c = _connector(f"127.0.0.1:{proxy.port}/{chroot}", consumer_id="c")
    try:
        c.create_message_streams({"events": 1})
        wait_until(lambda: c.fetching and len(owners(zk, "g")) == 2, what="owned")
        session, before = c._zk.client_id[0], c.rebalances
        # a short cut (below the 4 s session timeout): the member stops delivering while it cannot know
        # whether its session (and so its ownership) survives, then comes back with the same session
        proxy.cut()
        wait_until(lambda: not c.fetching, timeout=5, what="paused")
        assert owners(zk, "g") == {("events", 0): "c", ("events", 1): "c"}  # still ours on the server
        time.sleep(0.5)
        proxy.restore()
        wait_until(lambda: c.fetching and c.rebalances > before, timeout=15, what="resumed")
        assert c._zk.client_id[0] == session
        assert c.owned_partitions() == {("events", 0), ("events", 1)}
        assert owners(zk, "g") == {("events", 0): "c", ("events", 1): "c"}

        # a long cut: the session expires, ownership goes with it; back online the member registers again
        proxy.cut()
        wait_until(lambda: owners(zk, "g") == {}, timeout=15, what="ownership expired with the session")
        proxy.restore()
        wait_until(lambda: c.fetching and len(owners(zk, "g")) == 2, timeout=20, what="reclaimed")
        assert c._zk.client_id[0] != session and members(zk, "g") == ["c"]
    finally:
        c.shutdown()
        proxy.close()


def test_roundrobin_spreads_single_partition_topics_and_mixed_groups_fall_back_to_range(zk_connect, zk):
    """Under a filter over six one-partition topics Algorithm 1 gives all six to the first member; with
    assignment_strategy="roundrobin" on every member they get three each. A member still on range makes
    the whole group use range (no partition is ever contested or orphaned during a rolling change)."""
    topics = [f"act{i}" for i in range(6)]
    for t in topics:
        write_topic(zk, t, 1)
    every = {(t, 0) for t in topics}
    cs = [_connector(zk_connect, consumer_id=f"m{i}", assignment_strategy="roundrobin") for i in range(2)]
    late = None
    try:
        for c in cs:
            c.create_message_streams_by_filter(r"act\d")
        o = wait_until(lambda: _balanced(zk, "g", cs, every), what="round-robin split")
        assert by_owner(o) == {"m0": [0, 0, 0], "m1": [0, 0, 0]}
        assert {t for (t, _), m in o.items() if m == "m0"} == {"act0", "act2", "act4"}
        late = _connector(zk_connect, consumer_id="m2")  # range: the group falls back to Algorithm 1
        late.create_message_streams_by_filter(r"act\d")
        o = wait_until(lambda: _balanced(zk, "g", [*cs, late], every), what="fallback to range")
        assert set(o.values()) == {"m0"}  # Algorithm 1 per topic: the first member takes each one
    finally:
        for c in [*cs, *([late] if late else [])]:
            c.shutdown()


def test_unknown_assignment_strategy_is_refused(zk_connect):
    with pytest.raises(ValueError, match="assignment_strategy"):
        ConsumerConnector("g", zk_connect, assignment_strategy="sticky")
