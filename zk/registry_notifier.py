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
from typing import Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent

from ferry.zk.kazoo_client import TRANSIENT_ERRORS as _TRANSIENT
from ferry.zk.registry_reads import Watch, read_brokers, read_topics
from ferry.zk.registry_session import RegistrySession
from ferry.zk.wakeable_thread import WakeableThread
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


class WatchedSubtree(Generic[_K, _V]):
    """One watched subtree (the brokers or the topics): its callbacks, whether it changed, the last snapshot."""

    def __init__(self, read: Callable[[KazooClient, Watch | None], dict[_K, _V]], wake: Callable[[], None]) -> None:
        self._read = read
        self._wake = wake
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[dict[_K, _V]], object]] = []
        self._new: list[Callable[[dict[_K, _V]], object]] = []  # not called yet: they get a first snapshot
        self.dirty = True
        self._last: dict[_K, _V] | None = None

    def add(self, callback: Callable[[dict[_K, _V]], object]) -> None:
        with self._lock:
            self._new.append(callback)

    def mark_dirty(self, _event: WatchedEvent | None = None) -> None:
        """A watch fired (kazoo's thread) or the session is new: read again at the next round."""
        self.dirty = True
        self._wake()

    def forget_snapshot(self) -> None:
        """A new notifier thread starts from nothing: every callback gets the next snapshot."""
        self._last = None

    def take_new(self) -> tuple[list[Callable[[dict[_K, _V]], object]], list[Callable[[dict[_K, _V]], object]]]:
        """(the callbacks added since the last round, every callback), the new ones joining the others."""
        with self._lock:
            new, self._new = self._new, []
            self._callbacks.extend(new)
            return new, list(self._callbacks)

    def put_back(self, new: list[Callable[[dict[_K, _V]], object]]) -> None:
        """A round failed before ``new`` got their first snapshot: they get it at the next one."""
        self.dirty = True
        with self._lock:
            for cb in new:
                self._callbacks.remove(cb)
            self._new[:0] = new

    def refresh(self, client: KazooClient, new: list[Callable[[dict[_K, _V]], object]],
                every: list[Callable[[dict[_K, _V]], object]]) -> None:
        """Read the subtree if it changed (re-arming its watches) and tell whoever has not seen it."""
        if every and (self.dirty or self._last is None):
            self.dirty = False
            current = self._read(client, self.mark_dirty)
            targets = every if current != self._last else new
            self._last = current
            _deliver(targets, current)
        elif new and self._last is not None:
            _deliver(new, self._last)


class RegistryNotifier:
    """Owns the brokers' and topics' watched subtrees and the notifier thread that serves their callbacks."""

    def __init__(self, session: RegistrySession) -> None:
        self._session = session
        self._thread = WakeableThread("zk-notifier")
        self._brokers: WatchedSubtree[int, BrokerInfo] = WatchedSubtree(read_brokers, self._thread.wake)
        self._topics: WatchedSubtree[str, TopicInfo] = WatchedSubtree(read_topics, self._thread.wake)

    def watch_topics(self, callback: TopicsCallback) -> None:
        """Call ``callback(all topics)`` now and after every change (topic created, grown or deleted)."""
        self._topics.add(callback)
        self._ensure_thread()

    def watch_brokers(self, callback: BrokersCallback) -> None:
        """Call ``callback(all live brokers)`` now and after every broker joins, leaves or re-registers."""
        self._brokers.add(callback)
        self._ensure_thread()

    def stop(self, timeout: float) -> None:
        self._thread.stop(timeout)

    def mark_all_dirty(self) -> None:
        """A new connection: the watches may have been lost, read everything again (never blocks)."""
        self._brokers.dirty = self._topics.dirty = True
        self._thread.wake()

    def _ensure_thread(self) -> None:
        self._session.client  # noqa: B018 - raises when not started
        self._thread.start(self._loop)

    def _loop(self) -> None:
        self._brokers.forget_snapshot()
        self._topics.forget_snapshot()
        while self._thread.next_round():
            new_b, every_b = self._brokers.take_new()
            new_t, every_t = self._topics.take_new()
            try:
                client = self._session.client
                # Brokers first: their callbacks are quick, while a topics callback may read thousands of
                # partition states, and a broker (its controller) must not wait that long to see who is alive.
                self._brokers.refresh(client, new_b, every_b)
                self._topics.refresh(client, new_t, every_t)
            except _TRANSIENT:
                # Reconnect (CONNECTED) marks both dirty and wakes us; new callbacks still need a first call.
                self._brokers.put_back(new_b)
                self._topics.put_back(new_t)
                self._thread.pause(0.2)
            except Exception:
                log.exception("reading the registry for watchers failed; retrying")
                self._brokers.dirty = self._topics.dirty = True
                self._thread.pause(0.5)
                self._thread.wake()
