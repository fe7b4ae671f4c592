"""Watches on brokers and topics, delivered as whole snapshots by one notifier thread.

ZooKeeper's watches are one-shot and fire on kazoo's thread, which must not block: a watch only marks
its subtree dirty and wakes the notifier, which re-reads the subtree (re-arming the watches in the same
reads) and hands callbacks the full, current map. Callbacks run on the notifier's thread, so they may call
back into the registry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from kazoo.protocol.states import WatchedEvent

from ferry.zk.kazoo_client import TRANSIENT_ERRORS as _TRANSIENT
from ferry.zk.registry_reads import read_brokers, read_topics
from ferry.zk.registry_session import RegistrySession
from ferry.zk.znodes import BrokerInfo, TopicInfo

log = logging.getLogger("ferry.zk.cluster_registry")  # one logger for the registry's parts
TopicsCallback = Callable[[dict[str, TopicInfo]], object]
BrokersCallback = Callable[[dict[int, BrokerInfo]], object]
_K = TypeVar("_K")
_V = TypeVar("_V")


def _deliver(callbacks: list[Callable[[dict[_K, _V]], object]], snapshot: dict[_K, _V]) -> None:
    for cb in callbacks:
        try:
            cb(dict(snapshot))
        except Exception:
            log.exception("registry watch callback %r failed", cb)


class RegistryNotifier:
    """Owns the watch callbacks, the dirty flags and the notifier thread that serves them."""

    def __init__(self, session: RegistrySession) -> None:
        self._session = session
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._topic_callbacks: list[TopicsCallback] = []
        self._broker_callbacks: list[BrokersCallback] = []
        self._new_topic_callbacks: list[TopicsCallback] = []
        self._new_broker_callbacks: list[BrokersCallback] = []
        self._topics_dirty = True
        self._brokers_dirty = True

    def watch_topics(self, callback: TopicsCallback) -> None:
        """Call ``callback(all topics)`` now and after every change (topic created, grown or deleted)."""
        with self._lock:
            self._new_topic_callbacks.append(callback)
        self._ensure_thread()

    def watch_brokers(self, callback: BrokersCallback) -> None:
        """Call ``callback(all live brokers)`` now and after every broker joins, leaves or re-registers."""
        with self._lock:
            self._new_broker_callbacks.append(callback)
        self._ensure_thread()

    def start(self) -> None:
        self._stopping.clear()

    def stop(self, timeout: float) -> None:
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout)
        self._thread = None

    def mark_all_dirty(self) -> None:
        """A new connection: the watches may have been lost, read everything again (never blocks)."""
        self._topics_dirty = self._brokers_dirty = True
        self._wake.set()

    def _ensure_thread(self) -> None:
        self._session.client  # noqa: B018 - raises when not started
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="zk-notifier", daemon=True)
                self._thread.start()
        self._wake.set()

    def _mark_topics_dirty(self, _event: WatchedEvent | None = None) -> None:
        self._topics_dirty = True
        self._wake.set()

    def _mark_brokers_dirty(self, _event: WatchedEvent | None = None) -> None:
        self._brokers_dirty = True
        self._wake.set()

    def _loop(self) -> None:
        last_topics: dict[str, TopicInfo] | None = None
        last_brokers: dict[int, BrokerInfo] | None = None
        while not self._stopping.is_set():
            if not self._wake.wait(timeout=1.0):
                continue
            self._wake.clear()
            if self._stopping.is_set():
                break
            with self._lock:
                new_t, self._new_topic_callbacks = self._new_topic_callbacks, []
                new_b, self._new_broker_callbacks = self._new_broker_callbacks, []
                self._topic_callbacks.extend(new_t)
                self._broker_callbacks.extend(new_b)
                topic_cbs, broker_cbs = list(self._topic_callbacks), list(self._broker_callbacks)
            try:
                client = self._session.client
                # Brokers first: their callbacks are quick, while a topics callback may read thousands of
                # partition states, and a broker (its controller) must not wait that long to see who is alive.
                if broker_cbs and (self._brokers_dirty or last_brokers is None):
                    self._brokers_dirty = False
                    current_b = read_brokers(client, self._mark_brokers_dirty)
                    targets_b = broker_cbs if current_b != last_brokers else new_b
                    last_brokers = current_b
                    _deliver(targets_b, current_b)
                elif new_b and last_brokers is not None:
                    _deliver(new_b, last_brokers)
                if topic_cbs and (self._topics_dirty or last_topics is None):
                    self._topics_dirty = False
                    current = read_topics(client, self._mark_topics_dirty)
                    targets = topic_cbs if current != last_topics else new_t
                    last_topics = current
                    _deliver(targets, current)
                elif new_t and last_topics is not None:
                    _deliver(new_t, last_topics)
            except _TRANSIENT:
                # Reconnect (CONNECTED) marks both dirty and wakes us; new callbacks still need a first call.
                self._topics_dirty = self._brokers_dirty = True
                with self._lock:
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
                self._wake.set()
