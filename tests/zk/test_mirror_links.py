"""A mirror link's producer id outlives the link (real ZooKeeper): a link re-created from the same live cluster
takes it back, so its leaders resume where the offline log says the copy ended; two links never share one."""

from __future__ import annotations

import pytest

from ferry.zk import connect
from ferry.zk.mirror_links import MirrorLink, MirrorLinkStore, UnknownLinkError
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
    # a new name for the same live cluster takes the unused id back; a second link does not share it
    assert store.create(MirrorLink("east", LIVE, ".*")).producer_id == 7
    assert store.create(MirrorLink("dc1", LIVE, ".*")).producer_id == -1
    assert store.set_producer_id_if_unset("dc1", 9).producer_id == 9
    store.delete("east")
    store.delete("dc1")
    assert store.create(MirrorLink("dc1", LIVE, ".*")).producer_id == 9
    assert store.create(MirrorLink("east", LIVE, ".*")).producer_id == 7


def test_deleting_a_missing_link_is_a_clear_error(store: MirrorLinkStore) -> None:
    with pytest.raises(UnknownLinkError, match="no mirror link 'nope'"):
        store.delete("nope")
