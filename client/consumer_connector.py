"""ConsumerConnector: a member of a consumer group coordinated through ZooKeeper (the paper's Algorithm 1).

There is no coordinator: each member registers ``/consumers/<g>/ids/<id>`` (ephemeral), watches the
brokers, the topics and the group's members, and on any change rebalances by itself:

1. compute its share: for each subscribed topic, sort the partitions and the members subscribed to the
   topic, take the j-th contiguous range (if the share did not change, nothing else happens);
2. stop fetching, drop what is queued, commit the consumed offsets, release its ownership nodes;
3. claim ``/consumers/<g>/owners/<t>/<p>`` (ephemeral) for each partition of its share; a claim that
   finds another member's node releases everything, backs off and starts over (bounded retries; the
   other member is still releasing, or its session has not expired yet);
4. fetch from ``/consumers/<g>/offsets/<t>/<p>`` (earliest/latest when absent or out of range).

Ownership nodes are ephemeral and claimed with create (which fails if the node exists), so at any time a
partition has at most one owner; a dead member's nodes vanish with its session, which is also what makes
the others rebalance. Messages reach the application through KafkaStreams in offset order per partition;
offsets are committed after delivery to the application (periodically, at rebalance and at shutdown):
at-least-once delivery.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ferry.client import group_dirs as dirs
from ferry.client.bootstrap import bootstrap_string, read_brokers
from ferry.client.errors import ClientError, ConsumerRebalanceFailedError
from ferry.client.fetcher import Fetcher
from ferry.client.group_store import read_members, read_offset, write_offset
from ferry.client.kafka_stream import KafkaStream
from ferry.client.partition_topic_info import PartitionTopicInfo
from ferry.client.range_assignor import range_for
from ferry.client.round_robin_assignor import round_robin_share
from ferry.client.subscription import STRATEGIES, Subscription
from ferry.zk import TopicInfo, ZkConnect
from ferry.zk import connect as zk_connect
from ferry.zk.znodes import BROKER_IDS_PATH, BROKER_TOPICS_PATH, topic_path

log = logging.getLogger("ferry.consumer")

TopicPartitionKey = tuple[str, int]
RebalanceListener = Callable[[set[TopicPartitionKey]], None]


class ConsumerConnector:
    def __init__(self, group: str, zookeeper: str, *, consumer_id: str | None = None,
                 auto_offset_reset: str = "earliest", auto_commit: bool = True, auto_commit_interval_s: float = 5.0,
                 rebalance_backoff_s: float = 1.0, max_rebalance_retries: int = 10, zk_session_timeout_s: float = 6.0,
                 consumer_timeout_s: float | None = None, queued_max_chunks: int = 16,
                 rebalance_listener: RebalanceListener | None = None,
                 fetcher_overrides: dict[str, object] | None = None, fetcher=None,
                 assignment_strategy: str = "range") -> None:
        self.group = dirs.validate_group(group)
        if assignment_strategy not in STRATEGIES:
            raise ValueError(f"assignment_strategy must be one of {', '.join(STRATEGIES)}, "
                             f"not {assignment_strategy!r}")
        self.assignment_strategy = assignment_strategy
        if auto_offset_reset not in ("earliest", "latest"):
            raise ValueError(f"auto_offset_reset must be 'earliest' or 'latest', not {auto_offset_reset!r}")
        if consumer_id is None:
            consumer_id = f"{group}_{socket.gethostname()}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
        self.consumer_id = dirs.validate_group(consumer_id)
        self.zk_connect = ZkConnect.parse(zookeeper)
        self.auto_offset_reset = auto_offset_reset
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_s
        self.rebalance_backoff_s = rebalance_backoff_s
        self.max_rebalance_retries = max(1, max_rebalance_retries)
        self.session_timeout_s = zk_session_timeout_s
        self.consumer_timeout_s = consumer_timeout_s
        self.queued_max_chunks = queued_max_chunks
        self.rebalance_listener = rebalance_listener
        self.rebalances = 0  # successful rebalances (ownership changed)

        self._zk = zk_connect(self.zk_connect, timeout=10.0, session_timeout=zk_session_timeout_s)
        self._zk.add_listener(self._on_zk_state)
        self._lock = threading.RLock()  # ownership and commits
        self._owned: dict[TopicPartitionKey, PartitionTopicInfo] = {}
        self._fetching = False  # the fetcher runs the current ownership (False after a failed release)
        self._subscription: Subscription | None = None
        self._topic_streams: dict[str, list[KafkaStream]] = {}
        self._filter_streams: list[KafkaStream] = []
        self._watched_topics: set[str] = set()
        self._brokers_bootstrap = ""
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._connected = threading.Event()
        self._connected.set()
        self._rebalance_needed = False
        self._session_lost = False
        self._suspended = False
        self._first_rebalance = threading.Event()
        # the fetcher: start_fetching(infos), stop_fetching(timeout), close(timeout); the mirror plugs in its own
        self._fetcher = fetcher if fetcher is not None else Fetcher(
            self.group, self.consumer_id, self._bootstrap, auto_offset_reset, overrides=fetcher_overrides)
        self._controller: threading.Thread | None = None

    # -- public API -----------------------------------------------------------------------------------
    def create_message_streams(self, topic_count: dict[str, int], wait_s: float = 15.0) -> dict[str, list[KafkaStream]]:
        """``{topic: n}`` -> n streams per topic; joins the group (returns after the first rebalance, or
        after ``wait_s`` if that takes longer)."""
        if not topic_count:
            raise ValueError("create_message_streams needs at least one topic")
        sub = Subscription(topics=dict(topic_count), strategy=self.assignment_strategy)
        self._topic_streams = {t: [self._new_stream() for _ in range(n)] for t, n in topic_count.items()}
        self._start(sub, wait_s)
        return {t: list(s) for t, s in self._topic_streams.items()}

    def create_message_streams_by_filter(self, include: str, exclude: str | None = None, n: int = 1,
                                         wait_s: float = 15.0) -> list[KafkaStream]:
        """n streams carrying every topic that fully matches ``include`` and not ``exclude`` (topics starting
        with ``__`` are skipped); topics created later are picked up by the watch on /brokers/topics."""
        sub = Subscription(include=include, exclude=exclude, streams=n, strategy=self.assignment_strategy)
        self._filter_streams = [self._new_stream() for _ in range(n)]
        self._start(sub, wait_s)
        return list(self._filter_streams)

    def owned_partitions(self) -> set[TopicPartitionKey]:
        with self._lock:
            return set(self._owned)

    def commit_offsets(self, offsets: dict[TopicPartitionKey, int] | None = None) -> dict[TopicPartitionKey, int]:
        """Store offsets in ZooKeeper: ``None`` = what the application has taken so far from the streams;
        else ``{(topic, partition): next offset}``. Partitions this member does not own (any more) are
        skipped, so a late commit can never overwrite the new owner's progress. Returns what was stored."""
        with self._lock:
            if self._session_lost:
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
                    write_offset(self._zk, self.group, key[0], key[1], off)
                    info.committed_offset = off
                done[key] = off
            return done

    def shutdown(self, timeout: float = 30.0) -> None:
        """Commit (if auto_commit), release ownership, leave the group, end the streams' iteration."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._wake.set()
        if self._controller is not None:
            self._controller.join(timeout)
        try:
            self._fetcher.stop_fetching(timeout)
        except TimeoutError:
            log.warning("%s: fetcher did not stop in time", self.consumer_id)
        try:
            with self._lock:
                if not self._session_lost and not self._zk.connected:
                    # Any ZooKeeper request would wait for a connection that may never come. What was
                    # consumed since the last commit is read again by the next owner (duplicates, no loss);
                    # owner and registration nodes are ephemeral and vanish with the session.
                    log.warning("%s: not connected to ZooKeeper at shutdown: not committing %d partition(s); "
                                "their ownership goes with the session", self.consumer_id, len(self._owned))
                    for info in self._owned.values():
                        info.valid = False
                    self._owned = {}
                elif not self._session_lost:
                    self._release_all(commit=self.auto_commit)
                    self._delete_registration()
        except KazooException as exc:
            log.warning("%s: could not release cleanly (%s); ephemeral nodes vanish with the session",
                        self.consumer_id, exc)
        self._fetcher.close(timeout)
        try:
            self._zk.stop()
            self._zk.close()
        except Exception as exc:  # closing must not raise
            log.debug("closing ZooKeeper client: %s", exc)
        for s in self._all_streams():
            s.shut_down()

    def __enter__(self) -> ConsumerConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- start-up ---------------------------------------------------------------------------------------
    def _new_stream(self) -> KafkaStream:
        return KafkaStream(self.queued_max_chunks, self.consumer_timeout_s)

    def _all_streams(self) -> list[KafkaStream]:
        return [s for streams in self._topic_streams.values() for s in streams] + self._filter_streams

    def _start(self, sub: Subscription, wait_s: float) -> None:
        if self._subscription is not None:
            raise ClientError("a ConsumerConnector subscribes once: create_message_streams* was already called")
        if self._closed.is_set():
            raise ClientError("the consumer connector is shut down")
        self._subscription = sub
        for path in (BROKER_IDS_PATH, BROKER_TOPICS_PATH, dirs.ids_dir(self.group)):
            self._zk.ensure_path(path)
        self._register()
        ChildrenWatch(self._zk, BROKER_IDS_PATH, self._on_brokers_change)
        ChildrenWatch(self._zk, BROKER_TOPICS_PATH, self._on_change)
        ChildrenWatch(self._zk, dirs.ids_dir(self.group), self._on_change)
        self._controller = threading.Thread(target=self._run, name=f"ferry-rebalance-{self.consumer_id}", daemon=True)
        self._request_rebalance()
        self._controller.start()
        self._first_rebalance.wait(wait_s)

    def _register(self) -> None:
        """Create our ephemeral registration; a node of a dead earlier session with our id is waited out."""
        assert self._subscription is not None
        path = dirs.id_path(self.group, self.consumer_id)
        data = self._subscription.encode()
        deadline = time.monotonic() + self.session_timeout_s + 2.0
        while True:
            try:
                self._zk.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                try:
                    _, stat = self._zk.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self._session():
                    self._zk.set(path, data)
                    return
                if time.monotonic() > deadline:
                    raise ClientError(f"consumer id {self.consumer_id!r} is already registered in group "
                                      f"{self.group!r} by another live session") from None
                time.sleep(0.2)

    def _delete_registration(self) -> None:
        path = dirs.id_path(self.group, self.consumer_id)
        try:
            _, stat = self._zk.get(path)
            if stat.ephemeralOwner == self._session():
                self._zk.delete(path, version=stat.version)
        except NoNodeError:
            pass

    # -- ZooKeeper events (kazoo's threads: set flags only, never block) -----------------------------------
    def _on_change(self, *_args) -> bool | None:
        if self._closed.is_set():
            return False
        self._request_rebalance()
        return None

    def _on_brokers_change(self, children) -> bool | None:
        self._brokers_bootstrap = ""  # re-read lazily by the fetcher thread
        return self._on_change(children)

    def _on_topic_data(self, _data, _stat, _event=None) -> bool | None:
        return self._on_change()

    def _on_zk_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._session_lost = True
            self._connected.clear()
        elif state == KazooState.SUSPENDED:
            self._suspended = True
            self._connected.clear()
        else:
            self._connected.set()
            if self._suspended:  # same session: resume through a rebalance (commit, release, claim, fetch)
                self._suspended = False
                self._rebalance_needed = True
        self._wake.set()

    def _request_rebalance(self) -> None:
        self._rebalance_needed = True
        self._wake.set()

    def _bootstrap(self) -> str:
        if not self._brokers_bootstrap:
            try:
                self._brokers_bootstrap = bootstrap_string(read_brokers(self._zk))
            except KazooException as exc:
                log.debug("reading brokers: %s", exc)
        return self._brokers_bootstrap

    # -- the controller thread: rebalances and auto-commits -----------------------------------------------
    def _run(self) -> None:
        next_commit = time.monotonic() + self.auto_commit_interval_s
        retry_at: float | None = None
        while not self._closed.is_set():
            now = time.monotonic()
            deadlines = [next_commit] if self.auto_commit else []
            if retry_at is not None:
                deadlines.append(retry_at)
            timeout = max(0.0, min(deadlines) - now) if deadlines else 1.0
            self._wake.wait(min(timeout, 1.0))
            if self._closed.is_set():
                break
            try:
                if self._wake.is_set():
                    self._closed.wait(0.05)  # let a burst of watch events settle
                    self._wake.clear()
                    if self._suspended and self._fetching:
                        self._pause()
                    if self._session_lost:
                        self._recover_session()
                    if self._rebalance_needed and self._connected.is_set():
                        self._rebalance_needed = False
                        retry_at = None if self._sync_rebalance() else time.monotonic() + 5 * self.rebalance_backoff_s
                if retry_at is not None and time.monotonic() >= retry_at:
                    retry_at = None
                    self._request_rebalance()
                if self.auto_commit and time.monotonic() >= next_commit and self._connected.is_set():
                    next_commit = time.monotonic() + self.auto_commit_interval_s
                    self.commit_offsets()
            except Exception:
                log.exception("%s: controller error; will retry", self.consumer_id)
                retry_at = time.monotonic() + self.rebalance_backoff_s
            finally:
                if not self._rebalance_needed:
                    self._first_rebalance.set()

    def _pause(self) -> None:
        """Cut off from ZooKeeper: our session may expire without us hearing of it, and then someone else
        owns our partitions. Stop delivering until we are connected again (ownership is kept; the rebalance
        after reconnecting commits what was taken, releases and claims again)."""
        log.warning("%s: disconnected from ZooKeeper; pausing", self.consumer_id)
        self._fetching = False
        self._fetcher.stop_fetching()
        with self._lock:
            for info in self._owned.values():
                info.valid = False
            for s in self._all_streams():
                s.clear()

    def _recover_session(self) -> None:
        """Our session expired: ZooKeeper dropped our registration and ownership, and others may already
        own our partitions. Stop at once, without committing, then re-register and rebalance."""
        log.warning("%s: ZooKeeper session expired; re-registering", self.consumer_id)
        self._fetching = False
        self._fetcher.stop_fetching()
        with self._lock:
            for info in self._owned.values():
                info.valid = False
            for s in self._all_streams():
                s.clear()
            self._owned = {}
        while not self._connected.wait(0.5):
            if self._closed.is_set():
                return
        with self._lock:
            self._session_lost = False
        self._register()
        self._request_rebalance()

    def _sync_rebalance(self) -> bool:
        for attempt in range(1, self.max_rebalance_retries + 1):
            if self._closed.is_set():
                return True
            try:
                if self._rebalance_once():
                    return True
            except KazooException as exc:
                log.warning("%s: rebalance attempt %d: ZooKeeper error %r", self.consumer_id, attempt, exc)
            if self._session_lost:
                return False
            self._closed.wait(self.rebalance_backoff_s)
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
            self._release_all(commit=self.auto_commit)
        claimed = self._claim(sorted(target))
        if claimed is None:
            return False
        infos = [PartitionTopicInfo(t, p, target[(t, p)], read_offset(self._zk, self.group, t, p))
                 for t, p in sorted(target)]
        with self._lock:
            if self._session_lost:
                return False
            self._owned = {(i.topic, i.partition): i for i in infos}
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

    def _claim(self, keys: list[TopicPartitionKey]) -> list[TopicPartitionKey] | None:
        """Claim all of ``keys`` or none: on a collision release what was claimed and return None."""
        claimed: list[TopicPartitionKey] = []
        me = self.consumer_id.encode()
        for topic, partition in keys:
            path = dirs.owner_path(self.group, topic, partition)
            try:
                self._zk.create(path, me, ephemeral=True, makepath=True)
                claimed.append((topic, partition))
                continue
            except NodeExistsError:
                pass
            try:
                data, stat = self._zk.get(path)
            except NoNodeError:
                data, stat = None, None
            if data == me and stat is not None and stat.ephemeralOwner == self._session():
                claimed.append((topic, partition))
                continue
            log.info("%s: %s/%d is still owned by %s; backing off", self.consumer_id, topic, partition,
                     data.decode("utf-8", "replace") if data else "(gone)")
            self._delete_owner_nodes(claimed)
            return None
        return claimed

    def _release_all(self, commit: bool) -> None:
        """Under the lock: invalidate what we own, drop queued chunks, commit, delete our owner nodes."""
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
        self._delete_owner_nodes(list(owned))
        self._owned = {}

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
        me = self.consumer_id.encode()
        session = self._session()
        if session is None:
            return  # not connected: our ephemeral nodes go with the session anyway
        for topic, partition in keys:
            path = dirs.owner_path(self.group, topic, partition)
            try:
                data, stat = self._zk.get(path)
                if data == me and stat.ephemeralOwner == session:
                    self._zk.delete(path, version=stat.version)
            except NoNodeError:
                pass
