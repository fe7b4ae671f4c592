"""Which link copies a topic that two links from one live cluster both select (docs/mirror.md, "One link per live
cluster").

Each link's batches carry its own producer id and so its own copy position: two links pulling the same live
partition would each copy all of it into the one offline partition. `ferry mirror link create/alter` refuse a
second link to the same live ZooKeeper address; a live cluster reached under two addresses (a host name and its
IP, two members of one ensemble) is caught here, by the live cluster's identity: the creation zxid and time of
its ``/brokers/ids`` znode (ferry's stand-in for Kafka's /cluster/id), which the first broker running a link
stores in it. Of the links of one identity that select a topic, the one created first (the older link znode,
then the name) copies it; the others leave it and say so ("failed: topic T is copied by link L").

Links from different live clusters never exclude each other: that is the paper's several datacenters feeding
one offline topic, each link with its own position.
"""

from __future__ import annotations

from kazoo.client import KazooClient

from ferry.client.topic_selection import TopicFilter
from ferry.zk.mirror_links import MirrorLink


def live_cluster_identity(client: KazooClient) -> str:
    """The live cluster's identity, the same under every address of its ZooKeeper (a chrooted client's view)."""
    stat = client.exists("/brokers/ids") or client.exists("/")
    assert stat is not None
    return f"{stat.czxid:x}-{stat.ctime}"


def overlap_reason(topic: str, other: str) -> str:
    return f"topic {topic} is copied by link {other}"


class LinkOverlap:
    """The offline cluster's links as one broker's pass sees them: for a link and a topic, the other link of the
    same live cluster that copies the topic instead, if any."""

    def __init__(self, links: list[MirrorLink], created: dict[str, int]) -> None:
        known = [lk for lk in links if lk.source_cluster]
        self._order = sorted(known, key=lambda lk: (created.get(lk.name, 0), lk.name))
        self._filters = {lk.name: TopicFilter(lk.include, lk.exclude) for lk in known}

    def copier_of(self, link: MirrorLink, topic: str) -> str | None:
        """The name of the link that copies ``topic`` instead of ``link`` (None: ``link`` copies it)."""
        if not link.source_cluster:
            return None
        for other in self._order:
            if other.source_cluster == link.source_cluster and self._filters[other.name].matches(topic):
                return None if other.name == link.name else other.name
        return None
