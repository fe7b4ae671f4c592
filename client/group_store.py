"""Reading and writing a consumer group's state in ZooKeeper: members, owners, committed offsets.

Shared by the ConsumerConnector (its own group) and `ferry groups` (any group). All functions take a
started, chrooted kazoo client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ferry.client import group_dirs as dirs
from ferry.client.subscription import Subscription

log = logging.getLogger("ferry.groups")


def list_groups(zk: KazooClient) -> list[str]:
    try:
        return sorted(zk.get_children(dirs.CONSUMERS_PATH))
    except NoNodeError:
        return []


def group_exists(zk: KazooClient, group: str) -> bool:
    return zk.exists(dirs.group_dir(group)) is not None


def read_members(zk: KazooClient, group: str) -> dict[str, Subscription | None]:
    """Registered members and their subscriptions (None for a registration that cannot be read).

    The registrations are read together (pipelined): every member reads them all at every rebalance, so
    one round trip each would make a group's rebalance grow with the square of its size."""
    out: dict[str, Subscription | None] = {}
    try:
        children = zk.get_children(dirs.ids_dir(group))
    except NoNodeError:
        return out
    reads = [(cid, zk.get_async(dirs.id_path(group, cid))) for cid in sorted(children)]
    for cid, request in reads:
        try:
            data, _ = request.get()
        except NoNodeError:
            continue  # left while we looked
        try:
            out[cid] = Subscription.decode(data)
        except ValueError as exc:
            log.warning("group %s: member %s has an unreadable registration (%s)", group, cid, exc)
            out[cid] = None
    return out


def _read_int_tree(zk: KazooClient, root: str, parse: Callable[[bytes], object]) -> dict[tuple[str, int], object]:
    out: dict[tuple[str, int], object] = {}
    try:
        topics = zk.get_children(root)
    except NoNodeError:
        return out
    for topic in topics:
        try:
            parts = zk.get_children(f"{root}/{topic}")
        except NoNodeError:
            continue
        for p in parts:
            if not p.isdigit():
                continue
            try:
                data, _ = zk.get(f"{root}/{topic}/{p}")
            except NoNodeError:
                continue
            value = parse(data)
            if value is not None:
                out[(topic, int(p))] = value
    return out


def _parse_offset(data: bytes) -> int | None:
    try:
        return int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None


def read_owners(zk: KazooClient, group: str) -> dict[tuple[str, int], str]:
    return _read_int_tree(zk, dirs.owners_dir(group), lambda d: d.decode("utf-8", "replace"))  # type: ignore[return-value]


def read_offsets(zk: KazooClient, group: str) -> dict[tuple[str, int], int]:
    return _read_int_tree(zk, dirs.offsets_dir(group), _parse_offset)  # type: ignore[return-value]


def read_offset(zk: KazooClient, group: str, topic: str, partition: int) -> int | None:
    return read_offsets_of(zk, group, [(topic, partition)])[(topic, partition)]


def read_offsets_of(zk: KazooClient, group: str, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    """The committed offsets of ``keys`` (None where there is none), read together (pipelined)."""
    out: dict[tuple[str, int], int | None] = {}
    for (topic, partition), request in [(k, zk.get_async(dirs.offset_path(group, *k))) for k in keys]:
        try:
            data, _ = request.get()
        except NoNodeError:
            out[(topic, partition)] = None
            continue
        off = _parse_offset(data)
        if off is None:
            log.warning("group %s: unreadable offset %r for %s/%d (ignored)", group, data, topic, partition)
        out[(topic, partition)] = off
    return out


def write_offset(zk: KazooClient, group: str, topic: str, partition: int, offset: int) -> None:
    """Store the next offset to consume (creating the node and its parents the first time)."""
    path = dirs.offset_path(group, topic, partition)
    value = str(int(offset)).encode("ascii")
    try:
        zk.set(path, value)
    except NoNodeError:
        try:
            zk.create(path, value, makepath=True)
        except NodeExistsError:
            zk.set(path, value)
