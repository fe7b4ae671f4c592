"""ClusterRegistry against a real ZooKeeper: brokers, session expiry, topics, watches."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from ferry.zk import (
    BrokerIdConflictError,
    ClusterRegistry,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    NoBrokersError,
    RegistryNotStartedError,
    TopicExistsError,
    UnknownTopicError,
    ZkConnect,
)
from ferry.zk.assignment import start_index

SESSION = 4.0  # ZooKeeper's minimum (2 x tickTime) keeps the waits in these tests short


@pytest.fixture
def registries(zk_connect: str) -> Iterator[Callable[[], ClusterRegistry]]:
    started: list[ClusterRegistry] = []

    def make() -> ClusterRegistry:
        r = ClusterRegistry(zk_connect, timeout=SESSION).start()
        started.append(r)
        return r

    yield make
    for r in started:
        r.stop()


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def expire_session(client: KazooClient) -> None:
    """A real server-side expiry: a second connection with the same session id and password closes it."""
    hosts = ",".join(f"{h}:{p}" for h, p in client.hosts)
    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_chroot_is_created_and_used(registries, zk_server, zk_connect: str) -> None:
    r = registries()
    r.register_broker(1, "127.0.0.1", 9092, "live")
    chroot = ZkConnect.parse(zk_connect).chroot
    raw = KazooClient(hosts=zk_server.connect)
    raw.start(timeout=10)
    try:
        data, stat = raw.get(f"{chroot}/brokers/ids/1")
        assert stat.ephemeralOwner == r.client.client_id[0]
        doc = json.loads(data)
        assert {k: doc[k] for k in ("host", "port", "datacenter", "version")} == {
            "host": "127.0.0.1", "port": 9092, "datacenter": "live", "version": 1}
    finally:
        raw.stop()
        raw.close()


def test_register_and_unregister(registries) -> None:
    a, b, observer = registries(), registries(), registries()
    a.register_broker(1, "127.0.0.1", 9092, "live")
    b.register_broker(2, "127.0.0.1", 9093, "live")
    brokers = observer.brokers()
    assert sorted(brokers) == [1, 2]
    assert brokers[2].address == "127.0.0.1:9093" and brokers[2].datacenter == "live"
    a.unregister_broker()
    assert sorted(observer.brokers()) == [2]
    b.stop()  # closing the session removes the ephemeral node at once
    assert observer.brokers() == {}
    with pytest.raises(RegistryNotStartedError):
        b.brokers()


def test_session_expiry_reregisters(registries) -> None:
    broker, observer = registries(), registries()
    broker.register_broker(7, "127.0.0.1", 9099, "offline")
    old_session = broker.client.client_id[0]
    assert observer.client.get("/brokers/ids/7")[1].ephemeralOwner == old_session

    expire_session(broker.client)

    def reregistered() -> bool:
        stat = observer.client.exists("/brokers/ids/7")
        return stat is not None and stat.ephemeralOwner not in (0, old_session)

    wait_until(reregistered, timeout=15, what="broker 7 re-registered under a new session")
    new_owner = observer.client.exists("/brokers/ids/7").ephemeralOwner
    assert new_owner == broker.client.client_id[0] != old_session
    assert observer.brokers()[7].port == 9099
    # and the re-created node is still tied to the session: stopping removes it
    broker.stop()
    assert observer.client.exists("/brokers/ids/7") is None


def test_deleted_registration_is_recreated(registries) -> None:
    broker, observer = registries(), registries()
    broker.register_broker(3, "127.0.0.1", 9100)
    observer.client.delete("/brokers/ids/3")
    wait_until(lambda: observer.client.exists("/brokers/ids/3") is not None, what="node re-created")


def test_broker_id_conflict(registries) -> None:
    first, second = registries(), registries()
    first.register_broker(1, "127.0.0.1", 9092)
    t0 = time.monotonic()
    with pytest.raises(BrokerIdConflictError, match="already registered .*127.0.0.1:9092"):
        second.register_broker(1, "127.0.0.1", 9093, wait_for_stale=0.5)
    assert time.monotonic() - t0 < 5
    assert first.brokers()[1].port == 9092  # the holder is untouched


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_stale_registration_of_killed_broker_is_waited_out(registries, zk_connect: str) -> None:
    """A SIGKILLed broker's node lingers until its session expires; a restart waits it out."""
    fresh = registries()  # the cluster's chroot exists before the broker below registers in it
    script = (
        "import sys, time\n"
        "from kazoo.client import KazooClient\n"
        f"zk = KazooClient(hosts={str(ZkConnect.parse(zk_connect))!r}, timeout={SESSION})\n"
        "zk.start(timeout=10)\n"
        "zk.create('/brokers/ids/5', b'{\"host\":\"127.0.0.1\",\"port\":1,\"version\":1}', ephemeral=True, makepath=True)\n"
        "print('registered', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "registered"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert fresh.brokers()[5].port == 1  # the dead broker still looks alive
    t0 = time.monotonic()
    fresh.register_broker(5, "127.0.0.1", 9095, wait_for_stale=SESSION + 10)
    assert time.monotonic() - t0 < SESSION + 10
    assert fresh.brokers()[5].port == 9095


def test_topic_crud(registries) -> None:
    a, b = registries(), registries()
    with pytest.raises(NoBrokersError):
        a.create_topic("early", 1)
    a.register_broker(1, "127.0.0.1", 9092)
    b.register_broker(2, "127.0.0.1", 9093)
    info = a.create_topic("page_view", 4, {"retention.ms": "3600000"})
    start = [1, 2][start_index("page_view", 2)]
    other = 3 - start
    assert info.partitions == {0: start, 1: other, 2: start, 3: other}
    assert info.config == {"retention.ms": "3600000"}
    raw = json.loads(a.client.get("/brokers/topics/page_view")[0])
    assert raw.pop("topic_id") == info.topic_id
    assert raw == {"version": 1, "partitions": {"0": [start], "1": [other], "2": [start], "3": [other]},
                   "config": {"retention.ms": "3600000"}}
    assert b.topics()["page_view"] == info
    assert b.topic("page_view") == info and b.topic("nope") is None

    with pytest.raises(TopicExistsError, match="already exists"):
        b.create_topic("page_view", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        b.create_topic("page.view", 1)

    grown = b.add_partitions("page_view", 6)
    assert {p: grown.partitions[p] for p in range(4)} == info.partitions  # existing partitions stay put
    assert grown.partitions[4] == start and grown.partitions[5] == other
    assert grown.config == info.config
    with pytest.raises(InvalidPartitionsError, match="must be larger"):
        b.add_partitions("page_view", 6)
    with pytest.raises(UnknownTopicError, match="does not exist"):
        b.add_partitions("missing", 3)

    a.delete_topic("page_view")
    assert "page_view" not in b.topics()
    with pytest.raises(UnknownTopicError):
        a.delete_topic("page_view")


def test_start_offset_varies_by_topic(registries) -> None:
    r = registries()
    r.register_broker(1, "127.0.0.1", 9091)
    for i in (2, 3):
        registries().register_broker(i, "127.0.0.1", 9090 + i)
    leaders = {r.create_topic(f"t{i}", 1).partitions[0] for i in range(12)}
    assert len(leaders) > 1, "every single-partition topic landed on the same broker"


@pytest.mark.parametrize(
    ("name", "partitions", "config", "error"),
    [
        ("bad name", 1, None, InvalidTopicError),
        ("..", 1, None, InvalidTopicError),
        ("x" * 250, 1, None, InvalidTopicError),
        ("a/b", 1, None, InvalidTopicError),
        ("ok", 0, None, InvalidPartitionsError),
        ("ok", -3, None, InvalidPartitionsError),
        ("ok", "3", None, InvalidPartitionsError),
        ("ok", True, None, InvalidPartitionsError),
        ("ok", 1, {"": "x"}, InvalidConfigError),
        ("ok", 1, {"retention.ms": None}, InvalidConfigError),
        ("ok", 1, ["retention.ms=1"], InvalidConfigError),
    ],
)
def test_bad_topics_refused(registries, name, partitions, config, error) -> None:
    r = registries()
    r.register_broker(1, "127.0.0.1", 9092)
    with pytest.raises(error):
        r.create_topic(name, partitions, config)
    assert r.topics() == {}


def test_malformed_topic_znode_is_skipped(registries) -> None:
    r = registries()
    r.register_broker(1, "127.0.0.1", 9092)
    r.create_topic("good", 1)
    r.client.create("/brokers/topics/junk", b"not json")
    assert sorted(r.topics()) == ["good"]


def test_watches_receive_full_maps(registries) -> None:
    watcher, broker1, broker2 = registries(), registries(), registries()
    topic_maps: list[dict] = []
    broker_maps: list[dict] = []
    cond = threading.Condition()

    def on_topics(m):
        with cond:
            topic_maps.append({k: v.partitions for k, v in m.items()})
            cond.notify_all()

    def on_brokers(m):
        with cond:
            broker_maps.append(sorted(m))
            cond.notify_all()

    broker1.register_broker(1, "127.0.0.1", 9092)
    watcher.watch_topics(on_topics)
    watcher.watch_brokers(on_brokers)
    wait_until(lambda: topic_maps == [{}] and broker_maps == [[1]], what="initial maps")

    broker2.register_broker(2, "127.0.0.1", 9093)
    wait_until(lambda: broker_maps[-1] == [1, 2], what="broker 2 seen")
    broker1.create_topic("a", 2)
    wait_until(lambda: topic_maps and set(topic_maps[-1]) == {"a"}, what="topic a seen")
    broker1.create_topic("b", 1)
    wait_until(lambda: set(topic_maps[-1]) == {"a", "b"}, what="topic b seen (map holds both)")
    broker2.add_partitions("a", 5)
    wait_until(lambda: len(topic_maps[-1]["a"]) == 5, what="a grown to 5")
    broker1.delete_topic("b")
    wait_until(lambda: set(topic_maps[-1]) == {"a"}, what="b gone")
    broker2.stop()
    wait_until(lambda: broker_maps[-1] == [1], what="broker 2 gone")

    # a late subscriber gets the current state right away
    late: list[dict] = []
    watcher.watch_topics(lambda m: late.append(m))
    wait_until(lambda: late and set(late[0]) == {"a"}, what="late subscriber's first map")

    # watches survive a session expiry of the watcher
    old = watcher.client.client_id[0]
    expire_session(watcher.client)
    wait_until(lambda: (watcher.client.client_id or (old,))[0] != old and watcher.client.connected, timeout=15,
               what="watcher reconnected with a new session")
    broker1.create_topic("after_expiry", 1)
    wait_until(lambda: "after_expiry" in topic_maps[-1], timeout=15, what="topic seen after expiry")


def test_callback_errors_do_not_stop_watching(registries) -> None:
    r = registries()
    r.register_broker(1, "127.0.0.1", 9092)
    seen: list[set] = []

    def flaky(m):
        seen.append(set(m))
        if len(seen) == 1:
            raise RuntimeError("boom")

    r.watch_topics(flaky)
    wait_until(lambda: seen, what="first call")
    r.create_topic("x", 1)
    wait_until(lambda: seen[-1] == {"x"}, what="call after a failing one")


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_survives_zookeeper_restart(tmp_path) -> None:
    """A ZooKeeper restart (its own server here): the registration and the watches carry on."""
    from ferry.embedded import ZooKeeperServer

    zk = ZooKeeperServer(data_dir=tmp_path / "zk").start()
    broker = watcher = None
    try:
        connect = f"{zk.connect}/restart"
        broker = ClusterRegistry(connect, timeout=SESSION).start()
        watcher = ClusterRegistry(connect, timeout=SESSION).start()
        broker.register_broker(1, "127.0.0.1", 9092)
        maps: list[set] = []
        watcher.watch_topics(lambda m: maps.append(set(m)))
        wait_until(lambda: maps == [set()], what="first map")
        zk.stop()
        time.sleep(SESSION + 1)  # longer than the session timeout: the server decides what survives
        zk = ZooKeeperServer(port=zk.port, data_dir=tmp_path / "zk").start()
        wait_until(lambda: broker.client.connected and watcher.client.connected, timeout=20, what="reconnected")
        wait_until(lambda: 1 in watcher.brokers(), timeout=20, what="broker 1 registered after the restart")
        broker.create_topic("after_restart", 1)
        wait_until(lambda: maps[-1] == {"after_restart"}, timeout=20, what="topic seen after the restart")
    finally:
        for r in (broker, watcher):
            if r is not None:
                r.stop()
        zk.stop()
