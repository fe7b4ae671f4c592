"""ClusterRegistry: one cluster's brokers and topics in ZooKeeper (paper section 3.3).

A broker registers itself as an ephemeral znode, so the registry always shows who is alive; topics
are persistent znodes holding their partition → broker assignment. The registry owns one kazoo
session. Two background threads keep it honest:

* the *session keeper* re-creates the broker's ephemeral node after a session expiry (kazoo reports
  LOST, then reconnects with a new session whose ephemerals are empty) or if someone deletes it.
  kazoo forbids blocking calls inside its state listener, so the listener only sets an event.
* the *notifier* re-reads the watched subtree whenever a one-shot ZooKeeper watch fires (re-arming
  the watches in the same reads) and hands callbacks the full, current map. Callbacks run on this
  thread, never on kazoo's, so they may call back into the registry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType

from ferry.zk.assignment import assign_round_robin
from ferry.zk.errors import (
    BrokerIdConflictError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    RegistryNotStartedError,
    TopicExistsError,
    UnknownTopicError,
)
from ferry.zk.kazoo_client import connect
from ferry.zk.topic_name import colliding_topic, validate_topic_name
from ferry.zk.zk_connect import ZkConnect
from ferry.zk.znodes import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    BrokerInfo,
    TopicInfo,
    broker_path,
    topic_path,
)

log = logging.getLogger(__name__)

TopicsCallback = Callable[[dict[str, TopicInfo]], Any]
BrokersCallback = Callable[[dict[int, BrokerInfo]], Any]

_TRANSIENT = (ConnectionLoss, SessionExpiredError)
MAX_PARTITIONS = 100_000  # a sanity bound: each partition is a directory and open files on a broker


class ClusterRegistry:
    """Brokers and topics of the cluster rooted at ``zk_connect``'s chroot."""

    def __init__(self, zk_connect: str | ZkConnect, timeout: float = 10.0, create: bool = True) -> None:
        self.zk = ZkConnect.parse(zk_connect) if isinstance(zk_connect, str) else zk_connect
        self.timeout = timeout  # connect timeout and ZooKeeper session timeout, seconds
        self.create = create  # False: a read-only look (a missing chroot is an error; nothing is created)
        self._client: KazooClient | None = None
        self._stopping = threading.Event()
        self._registration: BrokerInfo | None = None
        self._reg_lock = threading.Lock()
        self._session_lost = False
        self._keeper_wake = threading.Event()
        self._keeper: threading.Thread | None = None
        # watches
        self._notify_wake = threading.Event()
        self._notifier: threading.Thread | None = None
        self._watch_lock = threading.Lock()
        self._topic_callbacks: list[TopicsCallback] = []
        self._broker_callbacks: list[BrokersCallback] = []
        self._new_topic_callbacks: list[TopicsCallback] = []
        self._new_broker_callbacks: list[BrokersCallback] = []
        self._topics_dirty = True
        self._brokers_dirty = True

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> ClusterRegistry:
        if self._client is not None:
            return self
        self._stopping.clear()
        client = connect(self.zk, timeout=self.timeout, create_chroot=self.create)
        try:
            if self.create:
                client.ensure_path(BROKER_IDS_PATH)
                client.ensure_path(BROKER_TOPICS_PATH)
        except Exception:
            client.stop()
            client.close()
            raise
        client.add_listener(self._on_state)
        self._client = client
        self._keeper = threading.Thread(target=self._keep_session, name="zk-session-keeper", daemon=True)
        self._keeper.start()
        return self

    def stop(self) -> None:
        """Close the session: ZooKeeper deletes this broker's ephemeral node at once."""
        client = self._client
        if client is None:
            return
        self._stopping.set()
        with self._reg_lock:
            self._registration = None
        self._keeper_wake.set()
        self._notify_wake.set()
        for thread in (self._keeper, self._notifier):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=self.timeout + 5)
        self._keeper = self._notifier = None
        client.remove_listener(self._on_state)
        try:
            client.stop()
        finally:
            client.close()
            self._client = None

    def __enter__(self) -> ClusterRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def connected(self) -> bool:
        """True while the session's connection to ZooKeeper is up."""
        return self._client is not None and self._client.connected

    @property
    def client(self) -> KazooClient:
        """The registry's kazoo client (rooted at the cluster chroot) for components keeping their own znodes."""
        if self._client is None:
            raise RegistryNotStartedError("ClusterRegistry is not started (call start() first)")
        return self._client

    # ----------------------------------------------------------------- brokers
    def register_broker(
        self, broker_id: int, host: str, port: int, datacenter: str = "", wait_for_stale: float | None = None
    ) -> BrokerInfo:
        """Create the ephemeral ``/brokers/ids/<id>``; it is re-created after a session expiry.

        A node left by a killed process with the same id disappears when that session times out;
        we wait up to ``wait_for_stale`` seconds (default: the session timeout plus 2 s) for that
        before giving up with BrokerIdConflictError.
        """
        if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
            raise ValueError(f"broker id must be a non-negative integer, not {broker_id!r}")
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"broker port must be 1-65535, not {port!r}")
        if not host:
            raise ValueError("broker host must not be empty")
        info = BrokerInfo(id=broker_id, host=host, port=port, datacenter=datacenter or "")
        wait = self.timeout + 2.0 if wait_for_stale is None else wait_for_stale
        with self._reg_lock:
            self._create_broker_node(info, wait)
            self._registration = info
        log.info("registered broker %d at %s (datacenter %r) in %s", broker_id, info.address, datacenter, self.zk)
        return info

    def unregister_broker(self) -> None:
        """Delete this broker's node (a clean shutdown says so before closing the session)."""
        with self._reg_lock:
            info, self._registration = self._registration, None
            if info is None:
                return
            if not self.client.connected:
                # A request would wait for a connection that may never come (ZooKeeper down): the node
                # is ephemeral, so ZooKeeper removes it when the session expires.
                log.warning("not connected to ZooKeeper: broker %d's registration goes when its session expires",
                            info.id)
                return
            try:
                _, stat = self.client.get(broker_path(info.id))
                if stat.ephemeralOwner == self.client.client_id[0]:
                    self.client.delete(broker_path(info.id), version=stat.version)
            except (NoNodeError, BadVersionError):
                pass

    def brokers(self) -> dict[int, BrokerInfo]:
        """The live brokers, by id."""
        return self.client.retry(self._read_brokers, None)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        try:
            data, _ = self.client.get(broker_path(broker_id))
        except NoNodeError:
            return None
        return BrokerInfo.decode(broker_id, data)

    @property
    def registration(self) -> BrokerInfo | None:
        return self._registration

    # ----------------------------------------------------------------- topics
    def create_topic(self, name: str, partitions: int, config: dict[str, str] | None = None) -> TopicInfo:
        """Create a topic, its partitions placed round-robin over the live brokers."""
        validate_topic_name(name)
        _check_partition_count(partitions, "partitions")
        config = _check_config(config)
        client = self.client
        existing = _children(client, BROKER_TOPICS_PATH, None)
        if name in existing:
            raise TopicExistsError(f"topic {name!r} already exists")
        other = colliding_topic(name, existing)
        if other is not None:
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic {other!r} ('.' and '_' are interchangeable in metric names)"
            )
        assignment = assign_round_robin(name, self.brokers(), 0, partitions)
        info = TopicInfo.from_assignment(name, assignment, config)
        try:
            client.create(topic_path(name), info.encode(), makepath=True)
        except NodeExistsError:
            raise TopicExistsError(f"topic {name!r} already exists") from None
        log.info("created topic %s with %d partitions: %s", name, partitions, info.partitions)
        return info

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow ``name`` to ``total`` partitions; existing partitions keep their brokers."""
        validate_topic_name(name)
        _check_partition_count(total, "total partitions")
        client = self.client
        for _ in range(20):  # compare-and-set against concurrent changes
            try:
                data, stat = client.get(topic_path(name))
            except NoNodeError:
                raise UnknownTopicError(f"topic {name!r} does not exist") from None
            current = TopicInfo.decode(name, data)
            if total <= current.partition_count:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {current.partition_count} partitions; "
                    f"the new total ({total}) must be larger (partitions can only be added)"
                )
            assignment = dict(current.replicas)
            added = total - current.partition_count
            assignment.update(assign_round_robin(name, self.brokers(), current.partition_count, added))
            info = TopicInfo.from_assignment(name, assignment, current.config)
            try:
                client.set(topic_path(name), info.encode(), version=stat.version)
            except BadVersionError:
                continue
            except NoNodeError:
                raise UnknownTopicError(f"topic {name!r} was deleted meanwhile") from None
            log.info("topic %s: %d -> %d partitions", name, current.partition_count, total)
            return info
        raise InvalidPartitionsError(f"topic {name!r} kept changing while adding partitions; try again")

    def delete_topic(self, name: str) -> None:
        """Remove the topic's assignment (brokers see it through their topic watch)."""
        validate_topic_name(name)
        try:
            self.client.delete(topic_path(name))
        except NoNodeError:
            raise UnknownTopicError(f"topic {name!r} does not exist") from None

    def topic(self, name: str) -> TopicInfo | None:
        try:
            data, _ = self.client.get(topic_path(name))
        except NoNodeError:
            return None
        return TopicInfo.decode(name, data)

    def topics(self) -> dict[str, TopicInfo]:
        return self.client.retry(self._read_topics, None)

    # ----------------------------------------------------------------- watches
    def watch_topics(self, callback: TopicsCallback) -> None:
        """Call ``callback(all topics)`` now and after every change (topic created, grown or deleted)."""
        with self._watch_lock:
            self._new_topic_callbacks.append(callback)
        self._ensure_notifier()

    def watch_brokers(self, callback: BrokersCallback) -> None:
        """Call ``callback(all live brokers)`` now and after every broker joins, leaves or re-registers."""
        with self._watch_lock:
            self._new_broker_callbacks.append(callback)
        self._ensure_notifier()

    # ----------------------------------------------------------------- internals
    def _create_broker_node(self, info: BrokerInfo, wait_for_stale: float) -> None:
        client = self.client
        path = broker_path(info.id)
        data = info.encode()
        deadline = time.monotonic() + wait_for_stale
        while True:
            try:
                client.create(path, data, ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                pass
            gone = threading.Event()
            try:
                old, stat = client.get(path, watch=lambda _event, gone=gone: gone.set())
            except NoNodeError:
                continue
            if stat.ephemeralOwner == client.client_id[0]:  # ours already (a retried create)
                if old != data:
                    client.set(path, data)
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._stopping.is_set():
                holder = _describe_node(info.id, old)
                raise BrokerIdConflictError(
                    f"broker id {info.id} is already registered by another live ZooKeeper session ({holder}); "
                    f"is another broker running with --id {info.id}?"
                )
            log.warning("broker id %d is held by an older session; waiting up to %.0f s for it to expire",
                        info.id, remaining)
            gone.wait(min(remaining, 1.0))
        # One-shot watch on our own node: a deletion (or change) wakes the keeper to check it.
        client.exists(path, watch=self._on_own_node_event)

    def _on_own_node_event(self, event: Any) -> None:
        if event.type in (EventType.DELETED, EventType.CHANGED) and not self._stopping.is_set():
            self._keeper_wake.set()

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: no blocking calls here.
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("ZooKeeper session to %s lost", self.zk)
        elif state == KazooState.CONNECTED:
            if self._session_lost:
                log.info("ZooKeeper session to %s re-established", self.zk)
            self._keeper_wake.set()
            self._topics_dirty = self._brokers_dirty = True
            self._notify_wake.set()

    def _keep_session(self) -> None:
        while not self._stopping.is_set():
            if not self._keeper_wake.wait(timeout=1.0):
                continue
            self._keeper_wake.clear()
            if self._stopping.is_set():
                break
            with self._reg_lock:
                info = self._registration
                if info is None:
                    continue
                try:
                    self._session_lost = False
                    self._create_broker_node(info, wait_for_stale=self.timeout + 2.0)
                except _TRANSIENT:
                    self._keeper_wake.set()  # retry when connected again
                except BrokerIdConflictError as exc:
                    log.error("%s; will keep trying", exc)
                    self._keeper_wake.set()
                except Exception:
                    log.exception("re-registering broker %d failed; will retry", info.id)
                    self._keeper_wake.set()
            if self._keeper_wake.is_set():
                self._stopping.wait(0.5)

    def _ensure_notifier(self) -> None:
        self.client  # noqa: B018 - raises when not started
        with self._watch_lock:
            if self._notifier is None:
                self._notifier = threading.Thread(target=self._notify_loop, name="zk-notifier", daemon=True)
                self._notifier.start()
        self._notify_wake.set()

    def _mark_topics_dirty(self, _event: Any = None) -> None:
        self._topics_dirty = True
        self._notify_wake.set()

    def _mark_brokers_dirty(self, _event: Any = None) -> None:
        self._brokers_dirty = True
        self._notify_wake.set()

    def _notify_loop(self) -> None:
        last_topics: dict[str, TopicInfo] | None = None
        last_brokers: dict[int, BrokerInfo] | None = None
        while not self._stopping.is_set():
            if not self._notify_wake.wait(timeout=1.0):
                continue
            self._notify_wake.clear()
            if self._stopping.is_set():
                break
            with self._watch_lock:
                new_t, self._new_topic_callbacks = self._new_topic_callbacks, []
                new_b, self._new_broker_callbacks = self._new_broker_callbacks, []
                self._topic_callbacks.extend(new_t)
                self._broker_callbacks.extend(new_b)
                topic_cbs, broker_cbs = list(self._topic_callbacks), list(self._broker_callbacks)
            try:
                if topic_cbs and (self._topics_dirty or last_topics is None):
                    self._topics_dirty = False
                    current = self._read_topics(watch=self._mark_topics_dirty)
                    targets = topic_cbs if current != last_topics else new_t
                    last_topics = current
                    _deliver(targets, current)
                elif new_t and last_topics is not None:
                    _deliver(new_t, last_topics)
                if broker_cbs and (self._brokers_dirty or last_brokers is None):
                    self._brokers_dirty = False
                    current_b = self._read_brokers(watch=self._mark_brokers_dirty)
                    targets_b = broker_cbs if current_b != last_brokers else new_b
                    last_brokers = current_b
                    _deliver(targets_b, current_b)
                elif new_b and last_brokers is not None:
                    _deliver(new_b, last_brokers)
            except _TRANSIENT:
                # Reconnect (CONNECTED) marks both dirty and wakes us; new callbacks still need a first call.
                self._topics_dirty = self._brokers_dirty = True
                with self._watch_lock:
                    for cb in new_t:
                        self._topic_callbacks.remove(cb)
                    for cb in new_b:
                        self._broker_callbacks.remove(cb)
                    self._new_topic_callbacks[:0] = new_t
                    self._new_broker_callbacks[:0] = new_b
                self._stopping.wait(0.2)
            except Exception:
                log.exception("reading the registry for watchers failed; retrying")
                self._topics_dirty = self._brokers_dirty = True
                self._stopping.wait(0.5)
                self._notify_wake.set()

    def _read_topics(self, watch: Callable[[Any], None] | None) -> dict[str, TopicInfo]:
        client = self.client
        out: dict[str, TopicInfo] = {}
        for name in sorted(_children(client, BROKER_TOPICS_PATH, watch)):
            try:
                data, _ = client.get(topic_path(name), watch=watch)
            except NoNodeError:
                continue
            try:
                out[name] = TopicInfo.decode(name, data)
            except ValueError as exc:
                log.warning("ignoring malformed topic znode: %s", exc)
        return out

    def _read_brokers(self, watch: Callable[[Any], None] | None) -> dict[int, BrokerInfo]:
        client = self.client
        out: dict[int, BrokerInfo] = {}
        for child in _children(client, BROKER_IDS_PATH, watch):
            if not child.isdigit():
                continue
            try:
                data, _ = client.get(broker_path(int(child)), watch=watch)
            except NoNodeError:
                continue
            try:
                out[int(child)] = BrokerInfo.decode(int(child), data)
            except ValueError as exc:
                log.warning("ignoring malformed broker znode: %s", exc)
        return dict(sorted(out.items()))


def _children(client: KazooClient, path: str, watch: Callable[[Any], None] | None) -> list[str]:
    """Children of ``path``; a missing path (a read-only registry of an empty cluster) has none.

    With a watch, a missing path gets an exists-watch so that its creation is noticed too.
    """
    try:
        return client.get_children(path, watch=watch)
    except NoNodeError:
        if watch is not None and client.exists(path, watch=watch) is not None:
            return client.get_children(path, watch=watch)
        return []


def _deliver(callbacks: list[Callable[[Any], Any]], snapshot: dict) -> None:
    for cb in callbacks:
        try:
            cb(dict(snapshot))
        except Exception:
            log.exception("registry watch callback %r failed", cb)


def _check_partition_count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPartitionsError(f"{what} must be an integer, not {value!r}")
    if value < 1:
        raise InvalidPartitionsError(f"{what} must be at least 1 (got {value})")
    if value > MAX_PARTITIONS:
        raise InvalidPartitionsError(f"{what} must be at most {MAX_PARTITIONS} (got {value})")
    return value


def _check_config(config: dict[str, str] | None) -> dict[str, str]:
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise InvalidConfigError(f"topic config must be a mapping of names to values, not {type(config).__name__}")
    out = {}
    for key, value in config.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidConfigError(f"topic config name {key!r} must be a non-empty string")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise InvalidConfigError(f"topic config {key!r} must be a string, not {value!r}")
        out[key.strip()] = str(value)
    return out


def _describe_node(broker_id: int, data: bytes) -> str:
    try:
        return BrokerInfo.decode(broker_id, data).address
    except ValueError:
        return "unreadable registration"
