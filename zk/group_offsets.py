"""Committed offsets of the brokers' consumer groups (Kafka's group protocol), kept in ZooKeeper.

Kafka keeps them in the compacted ``__consumer_offsets`` topic; ferry keeps them next to the registry so that
they outlive the coordinator's broker without a replicated internal topic: whichever broker coordinates the
group next reads them from here. Layout (relative to the cluster's chroot)::

    /consumer_offsets/<group>                      {"version":1,"protocol_type":"consumer"}
    /consumer_offsets/<group>/<topic>/<partition>  {"version":1,"offset":42,"leader_epoch":3,
                                                    "metadata":"","commit_timestamp":1700000000000}

``<group>`` is the group id percent-encoded (``/`` and ``%`` and anything ZooKeeper would refuse; ``.`` and
``..`` as ``%2E``), so any group id Kafka accepts maps to one znode and back. This tree is apart from the
paper's ZooKeeper groups (``/consumers/<group>/offsets/...``, ferry's ConsumerConnector): a group id may
exist in both and they never mix.

One commit is one ZooKeeper transaction (every partition of the request, or none). Callers serialise the
commits of one group (the coordinator does) so a later commit never lands before an earlier one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from ferry.zk.errors import RegistryError

CONSUMER_OFFSETS_PATH = "/consumer_offsets"
DEFAULT_PROTOCOL_TYPE = "consumer"
_COMMIT_ATTEMPTS = 10

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1

    def encode(self) -> bytes:
        doc = {"version": 1, "offset": self.offset, "leader_epoch": self.leader_epoch, "metadata": self.metadata,
               "commit_timestamp": self.commit_timestamp}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes | None, what: str) -> CommittedOffset:
        """Raises ValueError on anything but a well-formed committed offset."""
        try:
            doc = json.loads((data or b"").decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{what}: not JSON ({exc})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("offset"), int):
            raise ValueError(f"{what}: no integer offset in {doc!r}")
        epoch = doc.get("leader_epoch", -1)
        ts = doc.get("commit_timestamp", -1)
        return cls(doc["offset"], epoch if isinstance(epoch, int) else -1, str(doc.get("metadata") or ""),
                   ts if isinstance(ts, int) else -1)


class GroupOffsetsError(RegistryError):
    """A commit could not be written (ZooKeeper kept changing under it)."""


def encode_group(group: str) -> str:
    """The znode name of a group id (reversible: decode_group)."""
    name = quote(group, safe="-_.~:@+=,;!$&'()*")
    return name.replace(".", "%2E") if name in (".", "..") else name


def decode_group(name: str) -> str:
    return unquote(name)


def group_path(group: str) -> str:
    return f"{CONSUMER_OFFSETS_PATH}/{encode_group(group)}"


def partition_offset_path(group: str, topic: str, partition: int) -> str:
    return f"{group_path(group)}/{topic}/{int(partition)}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def commit_offsets(client: KazooClient, group: str, offsets: Mapping[TopicPartition, CommittedOffset],
                   protocol_type: str = DEFAULT_PROTOCOL_TYPE) -> None:
    """Write every offset of one commit in one transaction, creating the group's and topics' znodes as needed.

    Raises GroupOffsetsError if the tree kept changing (a concurrent delete) for several attempts; kazoo's
    errors (connection loss) pass through."""
    if not offsets:
        return
    gpath = group_path(group)
    for _ in range(_COMMIT_ATTEMPTS):
        existing = _existing(client, gpath, {t for t, _ in offsets})
        tx = client.transaction()
        if existing is None:
            if client.exists(CONSUMER_OFFSETS_PATH) is None:
                try:
                    client.ensure_path(CONSUMER_OFFSETS_PATH)
                except NodeExistsError:
                    pass
            tx.create(gpath, json.dumps({"version": 1, "protocol_type": protocol_type}).encode())
            existing = {}
        for topic in sorted({t for t, _ in offsets}):
            parts = existing.get(topic)
            if parts is None:
                tx.create(f"{gpath}/{topic}", b"")
                parts = set()
            for (t, p), committed in sorted(offsets.items()):
                if t != topic:
                    continue
                path = f"{gpath}/{topic}/{int(p)}"
                if p in parts:
                    tx.set_data(path, committed.encode())
                else:
                    tx.create(path, committed.encode())
        results = tx.commit()
        if not any(isinstance(r, Exception) for r in results):
            return
        # NodeExists / NoNode: a concurrent commit or delete changed the tree between the read and the write
    raise GroupOffsetsError(f"committing offsets of group {group!r}: the znodes kept changing; try again")


def _existing(client: KazooClient, gpath: str, topics: set[str]) -> dict[str, set[int]] | None:
    """{topic: {partitions with a znode}} for ``topics`` under the group; None when the group znode is missing."""
    try:
        children = set(client.get_children(gpath))
    except NoNodeError:
        return None
    out: dict[str, set[int]] = {}
    for topic in topics & children:
        try:
            out[topic] = {int(p) for p in client.get_children(f"{gpath}/{topic}") if p.isdigit()}
        except NoNodeError:
            pass
    return out


def fetch_offsets(client: KazooClient, group: str, partitions: Iterable[TopicPartition] | None = None,
                  timeout: float = 10.0) -> dict[TopicPartition, CommittedOffset]:
    """The committed offsets of ``partitions`` (None: every partition the group has one for); partitions
    without one are absent. Unreadable znodes are skipped (ValueError is not raised to a consumer)."""
    gpath = group_path(group)
    wanted: list[TopicPartition]
    if partitions is None:
        try:
            topics = client.get_children(gpath)
        except NoNodeError:
            return {}
        listing = {t: client.get_children_async(f"{gpath}/{t}") for t in topics}
        wanted = []
        for t, result in listing.items():
            try:
                wanted.extend((t, int(p)) for p in result.get(timeout=timeout) if p.isdigit())
            except NoNodeError:
                pass
    else:
        wanted = list(partitions)
    pending = {tp: client.get_async(f"{gpath}/{tp[0]}/{int(tp[1])}") for tp in wanted}
    out: dict[TopicPartition, CommittedOffset] = {}
    for tp, result in pending.items():
        try:
            data, _ = result.get(timeout=timeout)
        except NoNodeError:
            continue
        try:
            out[tp] = CommittedOffset.decode(data, f"offset of group {group!r} on {tp[0]}-{tp[1]}")
        except ValueError:
            continue
    return out


def list_groups(client: KazooClient) -> list[str]:
    """Every group id with a znode here (committed offsets, or a group created by a commit), sorted."""
    try:
        return sorted(decode_group(c) for c in client.get_children(CONSUMER_OFFSETS_PATH))
    except NoNodeError:
        return []


def group_protocol_type(client: KazooClient, group: str) -> str | None:
    """The protocol type recorded for the group, or None when the group has no znode."""
    try:
        data, _ = client.get(group_path(group))
    except NoNodeError:
        return None
    try:
        doc = json.loads(data.decode() or "{}")
        return str(doc.get("protocol_type") or DEFAULT_PROTOCOL_TYPE)
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return DEFAULT_PROTOCOL_TYPE


def delete_group(client: KazooClient, group: str) -> bool:
    """Remove the group and all its offsets; False when it had no znode."""
    gpath = group_path(group)
    for _ in range(_COMMIT_ATTEMPTS):
        if client.exists(gpath) is None:  # (kazoo's recursive delete is silent about a missing node)
            return False
        try:
            client.delete(gpath, recursive=True)
            return True
        except NoNodeError:
            return False
        except NotEmptyError:
            continue  # a commit added a child meanwhile
    raise GroupOffsetsError(f"deleting group {group!r}: commits kept arriving; stop its members first")


def delete_offsets(client: KazooClient, group: str, partitions: Iterable[TopicPartition]) -> bool:
    """Remove the group's committed offsets of ``partitions`` (OffsetDelete), and a topic's znode left empty;
    False when the group has no znode (nothing committed)."""
    gpath = group_path(group)
    if client.exists(gpath) is None:
        return False
    topics = set()
    for topic, p in partitions:
        topics.add(topic)
        try:
            client.delete(partition_offset_path(group, topic, p))
        except NoNodeError:
            pass
    for topic in topics:
        try:
            if not client.get_children(f"{gpath}/{topic}"):
                client.delete(f"{gpath}/{topic}")
        except (NoNodeError, NotEmptyError):
            pass  # gone already, or a commit came in meanwhile
    return True


def expire_offsets(client: KazooClient, group: str, expired: Callable[[TopicPartition, CommittedOffset], bool],
                   drop_group: bool) -> tuple[int, bool]:
    """Remove the group's offsets for which ``expired`` holds (offsets.retention.minutes), each only if unchanged
    since read (a commit meanwhile wins), and with ``drop_group`` the group's znode once nothing is left.
    Returns (offsets removed, group removed)."""
    gpath = group_path(group)
    removed = 0
    for topic in _children(client, gpath):
        for part in _children(client, f"{gpath}/{topic}"):
            path = f"{gpath}/{topic}/{part}"
            try:
                data, stat = client.get(path)
                committed = CommittedOffset.decode(data, path)
            except NoNodeError:
                continue
            except ValueError:
                continue  # not ours to judge: left for a person
            if part.isdigit() and expired((topic, int(part)), committed):
                try:
                    client.delete(path, version=stat.version)
                    removed += 1
                except (NoNodeError, BadVersionError):
                    continue
        try:
            if not client.get_children(f"{gpath}/{topic}"):
                client.delete(f"{gpath}/{topic}")
        except (NoNodeError, NotEmptyError):
            pass
    if not drop_group:
        return removed, False
    try:
        client.delete(gpath)
        return removed, True
    except (NoNodeError, NotEmptyError):
        return removed, False


def delete_topic_offsets(client: KazooClient, topic: str) -> int:
    """Remove every group's offsets of a deleted topic (Kafka does the same); returns how many groups had some."""
    n = 0
    for name in _children(client, CONSUMER_OFFSETS_PATH):
        try:
            client.delete(f"{CONSUMER_OFFSETS_PATH}/{name}/{topic}", recursive=True)
            n += 1
        except NoNodeError:
            pass
    return n


def _children(client: KazooClient, path: str) -> list[str]:
    try:
        return client.get_children(path)
    except NoNodeError:
        return []
