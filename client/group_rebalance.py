"""ConsumerRebalance: the paper's Algorithm 1 run by each consumer: compute this member's share, claim it in
ZooKeeper, fetch it; release it on the next change."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.recipe.watchers import DataWatch

from ferry.client.consumer_streams import ConsumerStreams, TopicPartitionKey
from ferry.client.errors import ConsumerRebalanceFailedError
from ferry.client.group_registration import GroupRegistration
from ferry.client.group_store import read_members, read_offsets_of
from ferry.client.kafka_stream import KafkaStream
from ferry.client.partition_ownership import PartitionOwnership
from ferry.client.partition_topic_info import PartitionTopicInfo
from ferry.client.range_assignor import range_for
from ferry.client.round_robin_assignor import round_robin_share
from ferry.client.subscription import Subscription
from ferry.zk import TopicInfo
from ferry.zk.znodes import BROKER_TOPICS_PATH, topic_path

log = logging.getLogger("ferry.consumer")


class PartitionFetcher(Protocol):
    """What fetches the owned partitions: the connector's own Fetcher, or the mirror's."""

    def start_fetching(self, infos: list[PartitionTopicInfo]) -> None: ...

    def stop_fetching(self, timeout: float = 30.0) -> None: ...

    def close(self, timeout: float = 30.0) -> None: ...


class ConsumerRebalance:
    """One member's rebalance: stop fetching, commit and release what it owns, claim its new share, fetch it.

    The share is Algorithm 1's range per topic over the members subscribed to it (or, once every member asks
    for it, round-robin over all their topics), from a fresh read of the members and topics; a claim that
    finds another member's node releases everything, waits for that node to go (at most ``backoff_s``) and
    starts over, ``max_retries`` times. ``on_topic_change`` is the watch on each matching topic's node
    (partitions added later trigger a rebalance too).
    """

    def __init__(self, zk: KazooClient, group: str, consumer_id: str, registration: GroupRegistration,
                 ownership: PartitionOwnership, streams: ConsumerStreams, fetcher: PartitionFetcher, *,
                 auto_commit: bool, max_retries: int, backoff_s: float, closed: threading.Event,
                 on_topic_change: Callable[..., bool | None]) -> None:
        self.zk = zk
        self.group = group
        self.consumer_id = consumer_id
        self.registration = registration
        self.ownership = ownership
        self.streams = streams
        self.fetcher = fetcher
        self.auto_commit = auto_commit
        self.max_retries = max(1, max_retries)
        self.backoff_s = backoff_s
        self.closed = closed
        self.on_topic_change = on_topic_change
        self.subscription: Subscription | None = None
        self.fetching = False  # the fetcher runs the current ownership (False after a failed release)
        self.count = 0  # successful rebalances (ownership changed)
        self._watched_topics: set[str] = set()

    def subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription

    def run(self) -> bool:
        """Rebalance, retrying collisions; False if it did not succeed (the caller retries later)."""
        for attempt in range(1, self.max_retries + 1):
            if self.closed.is_set():
                return True
            self.ownership.forget_blocker()
            try:
                if self._rebalance_once():
                    return True
            except KazooException as exc:
                log.warning("%s: rebalance attempt %d: ZooKeeper error %r", self.consumer_id, attempt, exc)
            if self.ownership.session_lost:
                return False
            # back off until the node that blocked us is deleted (its owner released it or its session
            # ended), at most backoff_s: a fixed sleep would make every member of a large group
            # that collided once wait the full backoff although the owner lets go within milliseconds
            self.ownership.wait_for_blocker(self.backoff_s)
            if self.closed.is_set():
                return True
        err = ConsumerRebalanceFailedError(
            f"{self.consumer_id}: could not claim its partitions of group {self.group!r} after "
            f"{self.max_retries} attempts; retrying later")
        log.error("%s", err)
        return False

    def stop_delivering(self, forget_ownership: bool) -> None:
        """Stop fetching and drop what the streams hold: partitions we may no longer own must not be handed
        out (cut off, or expired: then ZooKeeper has dropped our ownership too, and we forget it)."""
        self.fetching = False
        self.fetcher.stop_fetching()
        self.ownership.invalidate(forget_ownership)

    def _rebalance_once(self) -> bool:
        target = self._compute_share()
        owned = self.ownership.owned()
        if set(target) == owned and self.fetching:
            return True
        log.info("%s: rebalancing: %d -> %d partitions", self.consumer_id, len(owned), len(target))
        self.fetching = False
        self.fetcher.stop_fetching()
        kept = self.ownership.release_for(set(target), commit=self.auto_commit)
        claimed = self.ownership.claim(sorted(set(target) - kept), kept)
        if claimed is None:
            return False
        offsets = read_offsets_of(self.zk, self.group, sorted(target))
        infos = [PartitionTopicInfo(t, p, target[(t, p)], offsets[(t, p)]) for t, p in sorted(target)]
        if not self.ownership.own(infos):
            return False
        self.count += 1
        self.fetching = True
        self.fetcher.start_fetching(infos)
        log.info("%s owns %s", self.consumer_id, sorted(target))
        return True

    def _compute_share(self) -> dict[TopicPartitionKey, KafkaStream]:
        """Algorithm 1's split, from a fresh read of the members and topics; maps each partition of our
        share to the stream it feeds."""
        sub = self.subscription
        assert sub is not None
        members = read_members(self.zk, self.group)
        if self.consumer_id not in members:  # our registration is gone (expired session): come back
            self.registration.register(sub)
            members = read_members(self.zk, self.group)
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
        return self.streams.assign(share)

    def _topic_partitions(self, *subs: Subscription) -> dict[str, list[int]]:
        """Partitions of every topic that one of ``subs`` matches."""
        try:
            names = self.zk.get_children(BROKER_TOPICS_PATH)
        except NoNodeError:
            names = []
        out: dict[str, list[int]] = {}
        for name in names:
            if not any(sub.matches(name) for sub in subs):
                continue
            if name not in self._watched_topics:  # partitions added later trigger a rebalance too
                self._watched_topics.add(name)
                DataWatch(self.zk, topic_path(name), self.on_topic_change)
            try:
                data, _ = self.zk.get(topic_path(name))
                out[name] = sorted(TopicInfo.decode(name, data).partitions)
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("%s: topic %s has an unreadable registration (%s); skipped", self.consumer_id, name, exc)
        return out
