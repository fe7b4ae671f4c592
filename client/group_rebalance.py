"""The paper's Algorithm 1 run by each consumer: compute this member's share, claim it in ZooKeeper, release on the next change."""

from __future__ import annotations

import logging

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import DataWatch

from ferry.client import group_dirs as dirs
from ferry.client.errors import ConsumerRebalanceFailedError
from ferry.client.group_store import read_members, read_offsets_of, write_offset
from ferry.client.kafka_stream import KafkaStream
from ferry.client.partition_topic_info import PartitionTopicInfo
from ferry.client.range_assignor import range_for
from ferry.client.round_robin_assignor import round_robin_share
from ferry.client.subscription import Subscription
from ferry.zk import TopicInfo
from ferry.zk.znodes import BROKER_TOPICS_PATH, topic_path

log = logging.getLogger("ferry.consumer")
TopicPartitionKey = tuple[str, int]


class GroupRebalance:
    """The paper's Algorithm 1 run by each consumer: compute this member's share, claim it in ZooKeeper, release on the next change. (a part of ConsumerConnector)."""

    def _sync_rebalance(self) -> bool:
        for attempt in range(1, self.max_rebalance_retries + 1):
            if self._closed.is_set():
                return True
            self._owner_freed.clear()
            try:
                if self._rebalance_once():
                    return True
            except KazooException as exc:
                log.warning("%s: rebalance attempt %d: ZooKeeper error %r", self.consumer_id, attempt, exc)
            if self._session_lost:
                return False
            # back off until the node that blocked us is deleted (its owner released it or its session
            # ended), at most rebalance_backoff_s: a fixed sleep would make every member of a large group
            # that collided once wait the full backoff although the owner lets go within milliseconds
            self._owner_freed.wait(self.rebalance_backoff_s)
            if self._closed.is_set():
                return True
        err = ConsumerRebalanceFailedError(
            f"{self.consumer_id}: could not claim its partitions of group {self.group!r} after "
            f"{self.max_rebalance_retries} attempts; retrying later")
        log.error("%s", err)
        return False

    def _rebalance_once(self) -> bool:
        target = self._compute_share()
        with self._lock:
            if set(target) == set(self._owned) and self._fetching:
                return True
        log.info("%s: rebalancing: %d -> %d partitions", self.consumer_id, len(self._owned), len(target))
        self._fetching = False
        self._fetcher.stop_fetching()
        with self._lock:
            # nodes of partitions that stay ours are kept (ours all along, this session's: no one else can
            # have claimed them, and a lost session drops what we own); the rest go before we claim, so
            # that the members waiting for them can go on
            kept = set(target) & set(self._owned)
            self._release_all(commit=self.auto_commit, keep=kept)
            # whatever this attempt comes to hold, even if it fails half-way (a ZooKeeper error): the
            # next attempt, or shutdown, releases it; a node of ours no one knew of would stall the group
            self._pending_claims = set(target)
        claimed = self._claim(sorted(set(target) - kept), kept)
        if claimed is None:
            return False
        offsets = read_offsets_of(self._zk, self.group, sorted(target))
        infos = [PartitionTopicInfo(t, p, target[(t, p)], offsets[(t, p)]) for t, p in sorted(target)]
        with self._lock:
            if self._session_lost:
                return False
            self._owned = {(i.topic, i.partition): i for i in infos}
            self._pending_claims = set()
            self.rebalances += 1
            self._fetching = True
        self._fetcher.start_fetching(infos)
        log.info("%s owns %s", self.consumer_id, sorted(target))
        return True

    def _compute_share(self) -> dict[TopicPartitionKey, KafkaStream]:
        """Algorithm 1's split, from a fresh read of the members and topics; maps each partition of our
        share to the stream it feeds."""
        sub = self._subscription
        assert sub is not None
        members = read_members(self._zk, self.group)
        if self.consumer_id not in members:  # our registration is gone (expired session): come back
            self._register()
            members = read_members(self._zk, self.group)
        share: list[TopicPartitionKey] = []
        strategies = {s.strategy for s in members.values() if s is not None}
        if strategies == {"roundrobin"}:
            # dealt over every topic any member reads, so that all members deal the same cards
            topic_partitions = self._topic_partitions(*(s for s in members.values() if s is not None))
        else:
            topic_partitions = self._topic_partitions(sub)
        subscribers = {topic: [c for c, s in members.items() if s is not None and s.matches(topic)]
                       for topic in topic_partitions}
        if strategies == {"roundrobin"}:
            share = round_robin_share(topic_partitions, subscribers, self.consumer_id)
        else:
            if len(strategies) > 1:
                # Every member must divide the same way or partitions go unowned or contested: until all
                # members agree on roundrobin (a rolling change), everyone uses Algorithm 1.
                log.warning("%s: group %s mixes assignment strategies %s: using range until all agree",
                            self.consumer_id, self.group, sorted(strategies))
            for topic, partitions in sorted(topic_partitions.items()):
                share.extend((topic, p) for p in range_for(partitions, subscribers[topic], self.consumer_id))
        out: dict[TopicPartitionKey, KafkaStream] = {}
        if sub.is_filter:
            for i, key in enumerate(share):
                out[key] = self._filter_streams[i % len(self._filter_streams)]
        else:
            per_topic: dict[str, int] = {}
            for key in share:
                i = per_topic.get(key[0], 0)
                per_topic[key[0]] = i + 1
                streams = self._topic_streams[key[0]]
                out[key] = streams[i % len(streams)]
        return out

    def _topic_partitions(self, *subs: Subscription) -> dict[str, list[int]]:
        """Partitions of every topic that one of ``subs`` matches."""
        try:
            names = self._zk.get_children(BROKER_TOPICS_PATH)
        except NoNodeError:
            names = []
        out: dict[str, list[int]] = {}
        for name in names:
            if not any(sub.matches(name) for sub in subs):
                continue
            if name not in self._watched_topics:  # partitions added later trigger a rebalance too
                self._watched_topics.add(name)
                DataWatch(self._zk, topic_path(name), self._on_topic_data)
            try:
                data, _ = self._zk.get(topic_path(name))
                out[name] = sorted(TopicInfo.decode(name, data).partitions)
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("%s: topic %s has an unreadable registration (%s); skipped", self.consumer_id, name, exc)
        return out

    def _claim(self, keys: list[TopicPartitionKey], kept: set[TopicPartitionKey] = frozenset()
               ) -> list[TopicPartitionKey] | None:
        """Claim all of ``keys`` (``kept`` are ours already) or none: on a collision release what was
        claimed, ``kept`` too, and return None.

        The creates are sent together (pipelined) rather than one round trip each: a member taking over
        hundreds of partitions would otherwise hold half of them for seconds while the others wait."""
        me = self.consumer_id.encode()
        session = self._session()
        # the parents first, once per topic: a create with makepath that misses its parent costs three
        # requests more (4,000 for a first member taking 1,000 partitions instead of 1,000)
        for topic in sorted({t for t, _ in keys}):
            self._zk.ensure_path(f"{dirs.owners_dir(self.group)}/{topic}")
        creates = [(key, self._zk.create_async(dirs.owner_path(self.group, *key), me, ephemeral=True))
                   for key in keys]
        claimed: list[TopicPartitionKey] = sorted(kept)
        taken: list[TopicPartitionKey] = []
        for key, request in creates:
            try:
                request.get()
                claimed.append(key)
            except NodeExistsError:
                taken.append(key)
        blocker = None
        for key, request in [(k, self._zk.get_async(dirs.owner_path(self.group, *k))) for k in taken]:
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
        with self._lock:
            self._delete_owner_nodes(claimed)
            self._pending_claims = set()
        # wake the retry as soon as that node goes (a one-shot watch; if it is gone already, at once)
        if self._zk.exists(dirs.owner_path(self.group, topic, partition),
                           watch=lambda _event: self._owner_freed.set()) is None:
            self._owner_freed.set()
        return None

    def _release_all(self, commit: bool, keep: set[TopicPartitionKey] | None = None) -> None:
        """Under the lock: invalidate what we own, drop queued chunks, commit, delete our owner nodes
        (except those of ``keep``, partitions we are about to claim again)."""
        owned = self._owned
        for info in owned.values():
            info.valid = False
        for s in self._all_streams():
            s.clear()
        if owned and self.rebalance_listener is not None:
            try:
                self.rebalance_listener(set(owned))
            except Exception:
                log.exception("%s: rebalance listener failed", self.consumer_id)
        if commit:
            self._commit_infos(list(owned.values()))
        held = set(owned) | self._pending_claims
        self._delete_owner_nodes(sorted(k for k in held if not keep or k not in keep))
        self._owned = {}
        self._pending_claims = set()

    def _commit_infos(self, infos: list[PartitionTopicInfo]) -> dict[TopicPartitionKey, int]:
        done: dict[TopicPartitionKey, int] = {}
        for info in infos:
            off = info.consumed_offset
            if off is not None and off >= 0 and off != info.committed_offset:
                write_offset(self._zk, self.group, info.topic, info.partition, off)
                info.committed_offset = off
                done[(info.topic, info.partition)] = off
        return done

    def _session(self) -> int | None:
        client_id = self._zk.client_id
        return client_id[0] if client_id else None

    def _delete_owner_nodes(self, keys: list[TopicPartitionKey]) -> None:
        """Delete those of our owner nodes that are still ours (this session's), pipelined."""
        me = self.consumer_id.encode()
        session = self._session()
        if session is None:
            return  # not connected: our ephemeral nodes go with the session anyway
        paths = [dirs.owner_path(self.group, topic, partition) for topic, partition in keys]
        deletes = []
        for path, request in [(path, self._zk.get_async(path)) for path in paths]:
            try:
                data, stat = request.get()
            except NoNodeError:
                continue
            if data == me and stat.ephemeralOwner == session:
                deletes.append(self._zk.delete_async(path, version=stat.version))
        for request in deletes:
            try:
                request.get()
            except NoNodeError:
                pass
