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

from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch

from ferry.client import group_dirs as dirs
from ferry.client.bootstrap import bootstrap_string, read_brokers
from ferry.client.consumer_streams import ConsumerStreams, TopicPartitionKey
from ferry.client.errors import ClientError
from ferry.client.fetcher import Fetcher
from ferry.client.group_rebalance import ConsumerRebalance, PartitionFetcher
from ferry.client.group_registration import GroupRegistration
from ferry.client.kafka_stream import KafkaStream
from ferry.client.partition_ownership import PartitionOwnership, RebalanceListener
from ferry.client.subscription import STRATEGIES, Subscription
from ferry.wire.client_config import ClientConfig
from ferry.zk import ZkConnect
from ferry.zk import connect as zk_connect
from ferry.zk.znodes import BROKER_IDS_PATH, BROKER_TOPICS_PATH

log = logging.getLogger("ferry.consumer")


class ConsumerConnector:
    """A group member: its public API, the ZooKeeper watches and session events, and the controller thread.

    The work is its collaborators': ``registration`` (its node under ids), ``ownership`` (owner nodes, owned
    partitions, commits), ``rebalance`` (Algorithm 1 and the claim), ``streams`` (what the application
    reads) and the fetcher. ZooKeeper's threads only set flags here; the controller thread acts on them.
    """

    def __init__(self, group: str, zookeeper: str, *, consumer_id: str | None = None,
                 auto_offset_reset: str = "earliest", auto_commit: bool = True, auto_commit_interval_s: float = 5.0,
                 rebalance_backoff_s: float = 1.0, max_rebalance_retries: int = 10, zk_session_timeout_s: float = 6.0,
                 consumer_timeout_s: float | None = None, queued_max_chunks: int = 16,
                 rebalance_listener: RebalanceListener | None = None,
                 fetcher_overrides: dict[str, object] | None = None, fetcher: PartitionFetcher | None = None,
                 assignment_strategy: str = "range", client_config: ClientConfig | None = None) -> None:
        """``client_config``: TLS/SASL (wire/client_config.py) towards the brokers found in ZooKeeper, which are
        reached on their listeners of its security.protocol."""
        self.client_config = client_config or ClientConfig.plaintext()
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
        self.session_timeout_s = zk_session_timeout_s

        self._zk = zk_connect(self.zk_connect, timeout=10.0, session_timeout=zk_session_timeout_s)
        self._brokers_bootstrap = ""
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._connected = threading.Event()
        self._connected.set()
        self._rebalance_needed = False
        self._suspended = False
        self._first_rebalance = threading.Event()
        self._controller: threading.Thread | None = None
        self.streams = ConsumerStreams(queued_max_chunks, consumer_timeout_s)
        self.registration = GroupRegistration(self._zk, self.group, self.consumer_id, zk_session_timeout_s)
        self.ownership = PartitionOwnership(self._zk, self.group, self.consumer_id, self.streams, rebalance_listener)
        # the fetcher: start_fetching(infos), stop_fetching(timeout), close(timeout); the mirror plugs in its own
        self._fetcher: PartitionFetcher = fetcher if fetcher is not None else Fetcher(
            self.group, self.consumer_id, self._bootstrap, auto_offset_reset, overrides=fetcher_overrides,
            client_config=self.client_config)
        self.rebalance = ConsumerRebalance(
            self._zk, self.group, self.consumer_id, self.registration, self.ownership, self.streams, self._fetcher,
            auto_commit=auto_commit, max_retries=max_rebalance_retries, backoff_s=rebalance_backoff_s,
            closed=self._closed, on_topic_change=self._on_topic_data)
        self._zk.add_listener(self._on_zk_state)  # once what it sets exists

    @property
    def rebalances(self) -> int:
        """Successful rebalances (ownership changed)."""
        return self.rebalance.count

    @property
    def fetching(self) -> bool:
        """Whether the fetcher runs the current ownership (False while paused or after a failed release)."""
        return self.rebalance.fetching

    # -- public API -----------------------------------------------------------------------------------
    def create_message_streams(self, topic_count: dict[str, int], wait_s: float = 15.0) -> dict[str, list[KafkaStream]]:
        """``{topic: n}`` -> n streams per topic; joins the group (returns after the first rebalance, or
        after ``wait_s`` if that takes longer)."""
        if not topic_count:
            raise ValueError("create_message_streams needs at least one topic")
        sub = Subscription(topics=dict(topic_count), strategy=self.assignment_strategy)
        self._check_startable()
        streams = self.streams.create_per_topic(topic_count)
        self._start(sub, wait_s)
        return streams

    def create_message_streams_by_filter(self, include: str, exclude: str | None = None, n: int = 1,
                                         wait_s: float = 15.0) -> list[KafkaStream]:
        """n streams carrying every topic that fully matches ``include`` and not ``exclude`` (never an
        internal topic: `topic_selection.is_internal`); topics created later are picked up by the watch on
        /brokers/topics."""
        sub = Subscription(include=include, exclude=exclude, streams=n, strategy=self.assignment_strategy)
        self._check_startable()
        streams = self.streams.create_shared(n)
        self._start(sub, wait_s)
        return streams

    def owned_partitions(self) -> set[TopicPartitionKey]:
        return self.ownership.owned()

    def commit_offsets(self, offsets: dict[TopicPartitionKey, int] | None = None) -> dict[TopicPartitionKey, int]:
        """Store offsets in ZooKeeper: ``None`` = what the application has taken so far from the streams;
        else ``{(topic, partition): next offset}``. Partitions this member does not own (any more) are
        skipped, so a late commit can never overwrite the new owner's progress. Returns what was stored."""
        return self.ownership.commit(offsets)

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
            with self.ownership.lock:
                if not self.ownership.session_lost and not self._zk.connected:
                    # Any ZooKeeper request would wait for a connection that may never come. What was
                    # consumed since the last commit is read again by the next owner (duplicates, no loss);
                    # owner and registration nodes are ephemeral and vanish with the session.
                    self.ownership.give_up()
                elif not self.ownership.session_lost:
                    self.ownership.release_all(commit=self.auto_commit)
                    self.registration.delete()
        except KazooException as exc:
            log.warning("%s: could not release cleanly (%s); ephemeral nodes vanish with the session",
                        self.consumer_id, exc)
        self._fetcher.close(timeout)
        try:
            self._zk.stop()
            self._zk.close()
        except Exception as exc:  # closing must not raise
            log.debug("closing ZooKeeper client: %s", exc)
        self.streams.shut_down()

    def __enter__(self) -> ConsumerConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- start-up ---------------------------------------------------------------------------------------
    def _check_startable(self) -> None:
        if self.rebalance.subscription is not None:
            raise ClientError("a ConsumerConnector subscribes once: create_message_streams* was already called")
        if self._closed.is_set():
            raise ClientError("the consumer connector is shut down")

    def _start(self, sub: Subscription, wait_s: float) -> None:
        self.rebalance.subscribe(sub)
        for path in (BROKER_IDS_PATH, BROKER_TOPICS_PATH, dirs.ids_dir(self.group)):
            self._zk.ensure_path(path)
        self.registration.register(sub)
        ChildrenWatch(self._zk, BROKER_IDS_PATH, self._on_brokers_change)
        ChildrenWatch(self._zk, BROKER_TOPICS_PATH, self._on_change)
        ChildrenWatch(self._zk, dirs.ids_dir(self.group), self._on_change)
        self._controller = threading.Thread(target=self._run, name=f"ferry-rebalance-{self.consumer_id}", daemon=True)
        self._request_rebalance()
        self._controller.start()
        self._first_rebalance.wait(wait_s)

    def _bootstrap(self) -> str:
        if not self._brokers_bootstrap:
            try:
                self._brokers_bootstrap = bootstrap_string(read_brokers(self._zk),
                                                          self.client_config.security_protocol)
            except KazooException as exc:
                log.debug("reading brokers: %s", exc)
        return self._brokers_bootstrap

    # -- ZooKeeper events (kazoo's threads: set flags only, never block) -----------------------------------
    def _on_change(self, *_args: object) -> bool | None:
        if self._closed.is_set():
            return False
        self._request_rebalance()
        return None

    def _on_brokers_change(self, children: list[str]) -> bool | None:
        self._brokers_bootstrap = ""  # re-read lazily by the fetcher thread
        return self._on_change(children)

    def _on_topic_data(self, _data: object, _stat: object, _event: object = None) -> bool | None:
        return self._on_change()

    def _on_zk_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self.ownership.session_expired()
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

    # -- the controller thread: rebalances, auto-commits, session loss -------------------------------------
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
                    if self._suspended and self.rebalance.fetching:
                        self._pause()
                    if self.ownership.session_lost:
                        self._recover_session()
                    if self._rebalance_needed and self._connected.is_set():
                        self._rebalance_needed = False
                        retry_at = None if self.rebalance.run() else time.monotonic() + 5 * self.rebalance.backoff_s
                if retry_at is not None and time.monotonic() >= retry_at:
                    retry_at = None
                    self._request_rebalance()
                if self.auto_commit and time.monotonic() >= next_commit and self._connected.is_set():
                    next_commit = time.monotonic() + self.auto_commit_interval_s
                    self.commit_offsets()
            except Exception:
                log.exception("%s: controller error; will retry", self.consumer_id)
                retry_at = time.monotonic() + self.rebalance.backoff_s
            finally:
                if not self._rebalance_needed:
                    self._first_rebalance.set()

    def _pause(self) -> None:
        """Cut off from ZooKeeper: our session may expire without us hearing of it, and then someone else
        owns our partitions. Stop delivering until we are connected again (ownership is kept; the rebalance
        after reconnecting commits what was taken, releases and claims again)."""
        log.warning("%s: disconnected from ZooKeeper; pausing", self.consumer_id)
        self.rebalance.stop_delivering(forget_ownership=False)

    def _recover_session(self) -> None:
        """Our session expired: ZooKeeper dropped our registration and ownership, and others may already
        own our partitions. Stop at once, without committing, then re-register and rebalance."""
        log.warning("%s: ZooKeeper session expired; re-registering", self.consumer_id)
        self.rebalance.stop_delivering(forget_ownership=True)
        while not self._connected.wait(0.5):
            if self._closed.is_set():
                return
        self.ownership.session_regained()
        assert self.rebalance.subscription is not None
        self.registration.register(self.rebalance.subscription)
        self._request_rebalance()
