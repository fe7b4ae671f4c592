"""PartitionOwnership: the partitions a group member owns, its owner nodes in ZooKeeper and its commits."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ferry.client import group_dirs as dirs
from ferry.client.consumer_streams import ConsumerStreams, TopicPartitionKey
from ferry.client.group_store import write_offset
from ferry.client.partition_topic_info import PartitionTopicInfo

log = logging.getLogger("ferry.consumer")

RebalanceListener = Callable[[set[TopicPartitionKey]], None]


def session_id(zk: KazooClient) -> int | None:
    """The ZooKeeper session ephemeral nodes are created under now (None when not connected)."""
    client_id = zk.client_id
    return client_id[0] if client_id else None


class PartitionOwnership:
    """Who owns a partition is an ephemeral ``/consumers/<g>/owners/<t>/<p>`` node: claimed with create (which
    fails if it exists), so a partition has at most one owner, and gone with its owner's session.

    Holds the owned partitions' PartitionTopicInfo (a fresh one per ownership period, invalidated at release),
    the claims of a rebalance not finished yet (released by the next attempt or at shutdown) and whether the
    session was lost (then ZooKeeper dropped our nodes, and nothing is committed). One lock guards them: the
    controller thread changes them, the application commits.
    """

    def __init__(self, zk: KazooClient, group: str, consumer_id: str, streams: ConsumerStreams,
                 listener: RebalanceListener | None) -> None:
        self.zk = zk
        self.group = group
        self.consumer_id = consumer_id
        self.streams = streams
        self.listener = listener
        self.lock = threading.RLock()
        self._owned: dict[TopicPartitionKey, PartitionTopicInfo] = {}
        self._pending_claims: set[TopicPartitionKey] = set()  # claimed, not yet owned (a rebalance failed after claiming)
        self.session_lost = False
        self._owner_freed = threading.Event()  # an owner node we collided with was deleted: retry now

    # -- what we own ------------------------------------------------------------------------------------
    def owned(self) -> set[TopicPartitionKey]:
        with self.lock:
            return set(self._owned)

    def owned_infos(self) -> dict[TopicPartitionKey, PartitionTopicInfo]:
        """The owned partitions' infos now (their ``valid`` says whether the ownership period still runs).
        Without the lock, so an observer does not wait for a release in progress: the table is replaced,
        never changed in place."""
        return dict(self._owned)

    def own(self, infos: list[PartitionTopicInfo]) -> bool:
        """A rebalance claimed these: they are ours now (False if the session was lost meanwhile)."""
        with self.lock:
            if self.session_lost:
                return False
            self._owned = {(i.topic, i.partition): i for i in infos}
            self._pending_claims = set()
            return True

    def invalidate(self, forget: bool) -> None:
        """Stop handing out what was fetched (chunks queued or half iterated are dropped); ``forget``: ZooKeeper
        dropped our ownership with the session, so we forget it too."""
        with self.lock:
            for info in self._owned.values():
                info.valid = False
            self.streams.clear()
            if forget:
                self._owned = {}
                self._pending_claims = set()

    def session_expired(self) -> None:
        """ZooKeeper dropped our nodes with the session (kazoo's thread: a flag only)."""
        self.session_lost = True

    def session_regained(self) -> None:
        with self.lock:
            self.session_lost = False

    # -- commits ----------------------------------------------------------------------------------------
    def commit(self, offsets: dict[TopicPartitionKey, int] | None) -> dict[TopicPartitionKey, int]:
        """Store offsets in ZooKeeper: ``None`` = what the application has taken so far from the streams;
        else ``{(topic, partition): next offset}``. Partitions this member does not own (any more) are
        skipped, so a late commit can never overwrite the new owner's progress. Returns what was stored."""
        with self.lock:
            if self.session_lost:
                return {}
            if offsets is None:
                return self._commit_infos(list(self._owned.values()))
            done: dict[TopicPartitionKey, int] = {}
            for key, off in offsets.items():
                info = self._owned.get(key)
                if info is None:
                    log.info("%s: not committing %s/%d: no longer owned", self.consumer_id, key[0], key[1])
                    continue
                if off != info.committed_offset:
                    write_offset(self.zk, self.group, key[0], key[1], off)
                    info.committed_offset = off
                done[key] = off
            return done

    def _commit_infos(self, infos: list[PartitionTopicInfo]) -> dict[TopicPartitionKey, int]:
        done: dict[TopicPartitionKey, int] = {}
        for info in infos:
            off = info.consumed_offset
            if off is not None and off >= 0 and off != info.committed_offset:
                write_offset(self.zk, self.group, info.topic, info.partition, off)
                info.committed_offset = off
                done[(info.topic, info.partition)] = off
        return done

    # -- claims and releases ----------------------------------------------------------------------------
    def release_all(self, commit: bool) -> None:
        """Invalidate what we own, drop queued chunks, tell the listener, commit (if ``commit``), delete our
        owner nodes and those of claims not finished."""
        with self.lock:
            self._release(commit, set())

    def release_for(self, target: set[TopicPartitionKey], commit: bool) -> set[TopicPartitionKey]:
        """Before claiming ``target``: release what we own, except the nodes of partitions that stay ours
        (ours all along, this session's: no one else can have claimed them, and a lost session drops what
        we own); the rest go before we claim, so that the members waiting for them can go on. Returns
        those kept. ``target`` counts as claimed from here: whatever this attempt comes to hold, even if it
        fails half-way (a ZooKeeper error), the next attempt or shutdown releases; a node of ours no one
        knew of would stall the group."""
        with self.lock:
            kept = target & set(self._owned)
            self._release(commit, kept)
            self._pending_claims = set(target)
            return kept

    def _release(self, commit: bool, keep: set[TopicPartitionKey]) -> None:
        owned = self._owned
        for info in owned.values():
            info.valid = False
        self.streams.clear()
        if owned and self.listener is not None:
            try:
                self.listener(set(owned))
            except Exception:
                log.exception("%s: rebalance listener failed", self.consumer_id)
        if commit:
            self._commit_infos(list(owned.values()))
        held = set(owned) | self._pending_claims
        self._delete_owner_nodes(sorted(k for k in held if k not in keep))
        self._owned = {}
        self._pending_claims = set()

    def give_up(self) -> None:
        """ZooKeeper is out of reach at shutdown: our nodes go with the session; forget them uncommitted."""
        with self.lock:
            log.warning("%s: not connected to ZooKeeper at shutdown: not committing %d partition(s); "
                        "their ownership goes with the session", self.consumer_id, len(self._owned))
            for info in self._owned.values():
                info.valid = False
            self._owned = {}

    def claim(self, keys: list[TopicPartitionKey], kept: set[TopicPartitionKey]) -> list[TopicPartitionKey] | None:
        """Claim all of ``keys`` (``kept`` are ours already) or none: on a collision release what was
        claimed, ``kept`` too, and return None (`wait_for_blocker` then waits for the node in the way).

        The creates are sent together (pipelined) rather than one round trip each: a member taking over
        hundreds of partitions would otherwise hold half of them for seconds while the others wait."""
        zk, me = self.zk, self.consumer_id.encode()
        session = session_id(zk)
        # the parents first, once per topic: a create with makepath that misses its parent costs three
        # requests more (4,000 for a first member taking 1,000 partitions instead of 1,000)
        for topic in sorted({t for t, _ in keys}):
            zk.ensure_path(f"{dirs.owners_dir(self.group)}/{topic}")
        creates = [(key, zk.create_async(dirs.owner_path(self.group, *key), me, ephemeral=True)) for key in keys]
        claimed: list[TopicPartitionKey] = sorted(kept)
        taken: list[TopicPartitionKey] = []
        for key, request in creates:
            try:
                request.get()
                claimed.append(key)
            except NodeExistsError:
                taken.append(key)
        blocker = None
        for key, request in [(k, zk.get_async(dirs.owner_path(self.group, *k))) for k in taken]:
            try:
                data, stat = request.get()
            except NoNodeError:
                data, stat = None, None
            if data == me and stat is not None and stat.ephemeralOwner == session:
                claimed.append(key)  # ours already (kept from the previous ownership)
            elif blocker is None:
                blocker = (key, data)
        if blocker is None:
            return claimed
        (topic, partition), data = blocker
        log.info("%s: %s/%d is still owned by %s; backing off", self.consumer_id, topic, partition,
                 data.decode("utf-8", "replace") if data else "(gone)")
        with self.lock:
            self._delete_owner_nodes(claimed)
            self._pending_claims = set()
        # wake the retry as soon as that node goes (a one-shot watch; if it is gone already, at once)
        if zk.exists(dirs.owner_path(self.group, topic, partition),
                     watch=lambda _event: self._owner_freed.set()) is None:
            self._owner_freed.set()
        return None

    def forget_blocker(self) -> None:
        """A new rebalance attempt: only a node deleted from now on wakes it early."""
        self._owner_freed.clear()

    def wait_for_blocker(self, timeout: float) -> None:
        """Until the owner node that blocked the last claim is deleted (its owner released it or its session
        ended), at most ``timeout``."""
        self._owner_freed.wait(timeout)

    def _delete_owner_nodes(self, keys: list[TopicPartitionKey]) -> None:
        """Delete those of our owner nodes that are still ours (this session's), pipelined."""
        me = self.consumer_id.encode()
        session = session_id(self.zk)
        if session is None:
            return  # not connected: our ephemeral nodes go with the session anyway
        paths = [dirs.owner_path(self.group, topic, partition) for topic, partition in keys]
        deletes = []
        for path, request in [(path, self.zk.get_async(path)) for path in paths]:
            try:
                data, stat = request.get()
            except NoNodeError:
                continue
            if data == me and stat.ephemeralOwner == session:
                deletes.append(self.zk.delete_async(path, version=stat.version))
        for request in deletes:
            try:
                request.get()
            except NoNodeError:
                pass
