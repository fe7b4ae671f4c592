"""The paper's ZooKeeper consumer groups' committed offsets, as Kafka's OffsetFetch v0 reads them.

Kafka 0.8.1's OffsetFetch v0 read a group's offsets from ZooKeeper (``/consumers/<group>/offsets/<topic>/<p>``,
the offset as decimal text: the layout of ferry's ConsumerConnector and of the standalone mirror's group), v1 and
later from the broker's own store (zk/group_offsets.py here). The brokers answer v0 from this tree, so a tool with
`--bootstrap-server` alone (`ferry mirror status`) reads the standalone mirror's committed offsets.
"""

from __future__ import annotations

from collections.abc import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

CONSUMERS_PATH = "/consumers"  # client/group_dirs.py builds the rest of the tree on it

TopicPartition = tuple[str, int]


def zookeeper_offset_path(group: str, topic: str, partition: int) -> str:
    return f"{CONSUMERS_PATH}/{group}/offsets/{topic}/{partition}"


def fetch_zookeeper_offsets(client: KazooClient, group: str, partitions: Iterable[TopicPartition],
                            timeout: float = 10.0) -> dict[TopicPartition, int]:
    """The committed offsets of ``partitions`` in the ZooKeeper group ``group``; partitions without one (or an
    unreadable one) are absent."""
    return {tp: offset for tp, (offset, _) in fetch_zookeeper_commits(client, group, partitions, timeout).items()}


def fetch_zookeeper_commits(client: KazooClient, group: str, partitions: Iterable[TopicPartition],
                            timeout: float = 10.0) -> dict[TopicPartition, tuple[int, int]]:
    """{partition: (committed offset, the offset znode's modification time in ms)}, read in one round of
    asynchronous gets; partitions without a commit (or an unreadable one) are absent."""
    pending = {tp: client.get_async(zookeeper_offset_path(group, tp[0], int(tp[1]))) for tp in partitions}
    out: dict[TopicPartition, tuple[int, int]] = {}
    for tp, result in pending.items():
        try:
            data, stat = result.get(timeout=timeout)
            out[tp] = (int(data.decode("ascii").strip()), stat.mtime)
        except (NoNodeError, ValueError, UnicodeDecodeError):
            continue
    return out
