"""Where a consumer group lives in ZooKeeper (relative to the cluster's chroot), as in Kafka 0.7/0.8:

``/consumers/<group>/ids/<consumer>`` ephemeral registration (subscription);
``/consumers/<group>/owners/<topic>/<partition>`` ephemeral, value = owning consumer id;
``/consumers/<group>/offsets/<topic>/<partition>`` persistent, value = next offset to consume (ascii).
"""

from __future__ import annotations

from ferry.zk.zookeeper_group_offsets import CONSUMERS_PATH, zookeeper_offset_path

__all__ = ["CONSUMERS_PATH"]


def group_dir(group: str) -> str:
    return f"{CONSUMERS_PATH}/{group}"


def ids_dir(group: str) -> str:
    return f"{CONSUMERS_PATH}/{group}/ids"


def id_path(group: str, consumer_id: str) -> str:
    return f"{CONSUMERS_PATH}/{group}/ids/{consumer_id}"


def owners_dir(group: str) -> str:
    return f"{CONSUMERS_PATH}/{group}/owners"


def owner_path(group: str, topic: str, partition: int) -> str:
    return f"{CONSUMERS_PATH}/{group}/owners/{topic}/{partition}"


def offsets_dir(group: str) -> str:
    return f"{CONSUMERS_PATH}/{group}/offsets"


def offset_path(group: str, topic: str, partition: int) -> str:
    return zookeeper_offset_path(group, topic, partition)


def validate_group(group: object) -> str:
    """A group name becomes a znode name: refuse what would break the path."""
    if not isinstance(group, str) or not group:
        raise ValueError("consumer group name is empty")
    if "/" in group or group in (".", "..") or any(ord(c) < 32 for c in group):
        raise ValueError(f"consumer group name {group!r} may not contain '/' or control characters")
    return group
