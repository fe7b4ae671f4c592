"""Watches on brokers and topics, delivered as whole snapshots by one notifier thread (ZooKeeper's watch threads must not block)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    NoNodeError,
)

from ferry.zk.kazoo_client import TRANSIENT_ERRORS as _TRANSIENT
from ferry.zk.znodes import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    BrokerInfo,
    TopicInfo,
    broker_path,
    topic_path,
)

log = logging.getLogger("ferry.zk.cluster_registry")  # one logger for the registry's parts
TopicsCallback = Callable[[dict[str, TopicInfo]], Any]
BrokersCallback = Callable[[dict[int, BrokerInfo]], Any]


def read_children(client: KazooClient, path: str, watch: Callable[[Any], None] | None) -> list[str]:
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



class RegistryNotifier:
    """Watches on brokers and topics, delivered as whole snapshots by one notifier thread (ZooKeeper's watch threads must not block) (a part of ClusterRegistry)."""

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
                # Brokers first: their callbacks are quick, while a topics callback may read thousands of
                # partition states, and a broker (its controller) must not wait that long to see who is alive.
                if broker_cbs and (self._brokers_dirty or last_brokers is None):
                    self._brokers_dirty = False
                    current_b = self._read_brokers(watch=self._mark_brokers_dirty)
                    targets_b = broker_cbs if current_b != last_brokers else new_b
                    last_brokers = current_b
                    _deliver(targets_b, current_b)
                elif new_b and last_brokers is not None:
                    _deliver(new_b, last_brokers)
                if topic_cbs and (self._topics_dirty or last_topics is None):
                    self._topics_dirty = False
                    current = self._read_topics(watch=self._mark_topics_dirty)
                    targets = topic_cbs if current != last_topics else new_t
                    last_topics = current
                    _deliver(targets, current)
                elif new_t and last_topics is not None:
                    _deliver(new_t, last_topics)
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
        for name in sorted(read_children(client, BROKER_TOPICS_PATH, watch)):
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
        for child in read_children(client, BROKER_IDS_PATH, watch):
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
