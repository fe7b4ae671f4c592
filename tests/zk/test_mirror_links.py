"""A mirror link's producer id outlives the link (real ZooKeeper): a link re-created from the same live cluster
takes it back, so its leaders resume where the offline log says the copy ended; two links never share one."""

from __future__ import annotations

import pytest

from ferry.zk import connect
from ferry.zk.mirror_links import (
    MirrorLink,
    MirrorLinkStore,
    OverlappingLinkError,
    UnknownLinkError,
    same_zookeeper,
)
from ferry.zk.zk_connect import ZkConnect

LIVE = "127.0.0.1:2181/live-dc1"
OTHER = "127.0.0.1:2181/live-dc2"


@pytest.fixture
def store(zk_connect: str):
    client = connect(ZkConnect.parse(zk_connect), timeout=10)
    yield MirrorLinkStore(client)
    client.stop()
    client.close()


def test_a_deleted_links_producer_id_comes_back(store: MirrorLinkStore) -> None:
    store.create(MirrorLink("dc1", LIVE, ".*"))
    assert store.set_producer_id_if_unset("dc1", 7).producer_id == 7
    assert store.set_producer_id_if_unset("dc1", 8).producer_id == 7  # first wins
    store.delete("dc1")
    with pytest.raises(UnknownLinkError):
        store.get("dc1")
    # same name, same live cluster: the same id (whatever the filter now says)
    assert store.create(MirrorLink("dc1", LIVE, "views")).producer_id == 7
    store.delete("dc1")
    # another live cluster: a copy of its own, a new id (allocated by the first broker that runs it)
    assert store.create(MirrorLink("dc1", OTHER, ".*")).producer_id == -1
    store.delete("dc1")  # never ran: nothing kept for OTHER
    # a new name for the same live cluster takes the unused id back
    assert store.create(MirrorLink("east", LIVE, ".*")).producer_id == 7
    # ids kept for one live cluster under two names (from before one link per live cluster was enforced): a
    # link takes its own name's id, else one no stored link uses, never one in use
    store.client.set("/mirror/link_ids/dc1", b'{"producer_id": 9, "source_zookeeper": "%s"}' % LIVE.encode())
    store.delete("east")
    assert store.create(MirrorLink("dc1", LIVE, ".*")).producer_id == 9
    store.delete("dc1")
    assert store.create(MirrorLink("east", LIVE, ".*")).producer_id == 7
    store.delete("east")
    store.client.delete("/mirror/link_ids/east")
    assert store.create(MirrorLink("west", LIVE, ".*")).producer_id == 9  # the one left, unused


def test_one_link_per_live_zookeeper(store: MirrorLinkStore) -> None:
    """A second link to a live ZooKeeper that a stored link pulls from would copy everything twice: refused at
    create and at alter (the same chroot on a shared host, however the connect string is written)."""
    store.create(MirrorLink("dc1", LIVE, "views"))
    for same in (LIVE, "127.0.0.1/live-dc1", "10.0.0.9:2181," + LIVE):
        with pytest.raises(OverlappingLinkError, match="mirror link 'dc1' already copies from 127.0.0.1:2181/live-dc1"):
            store.create(MirrorLink("dc2", same, "clicks"))
    assert [lk.name for lk in store.all()] == ["dc1"]  # nothing written
    store.create(MirrorLink("dc2", OTHER, "clicks"))  # another live cluster: the paper's several datacenters
    with pytest.raises(OverlappingLinkError, match="'dc1' already copies"):
        store.update("dc2", source_zookeeper=LIVE)
    assert store.get("dc2")[0].source_zookeeper == OTHER
    # a link may move to another address of its own live cluster
    assert store.update("dc1", source_zookeeper="10.0.0.9:2181," + LIVE).source_zookeeper == "10.0.0.9:2181," + LIVE
    assert same_zookeeper("a:1,b:2/x", "b:2/x") and not same_zookeeper("a:1/x", "a:1/y") \
        and not same_zookeeper("a:1/x", "b:1/x")


def test_deleting_a_missing_link_is_a_clear_error(store: MirrorLinkStore) -> None:
    with pytest.raises(UnknownLinkError, match="no mirror link 'nope'"):
        store.delete("nope")
