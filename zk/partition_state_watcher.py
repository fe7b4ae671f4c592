"""Watches on partition state znodes: every change (an election, an ISR shrink) reaches the listeners.

This is how the controller's decisions reach the brokers (instead of Kafka's LeaderAndIsr request): every
broker watches the state of each partition it knows, and the controller watches them all. New partitions
are read in bulk: every read is sent at once (kazoo's ``*_async``, pipelined on the session) and answered
in order, so 10,000 partitions cost one round trip's latency, not 10,000 of them. A fired watch re-reads
its znode (re-arming the watch) without blocking kazoo's thread; a missing znode is watched with exists,
so its creation is seen. A new session (the old one expired: its watches are gone) re-reads them all.
Listeners run on kazoo's callback thread or the thread that called watch(), and must not block.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, KazooState, WatchedEvent, ZnodeStat

from ferry.zk.znodes import PartitionState, partition_state_path

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# (topic-partition, state or None when the znode is missing, znode version or -1)
StateListener = Callable[[TopicPartition, PartitionState | None, int], None]
READ_TIMEOUT_S = 60.0  # one bulk read's answers (a session lost meanwhile re-reads everything anyway)


class PartitionStateWatcher:
    """Keeps the watched partitions' states (``states``, ``missing``) and tells listeners of every change."""

    def __init__(self, client_getter: Callable[[], KazooClient]) -> None:
        self._client_getter = client_getter
        self._listeners: list[StateListener] = []
        self._watched: set[TopicPartition] = set()
        self._paths: dict[str, TopicPartition] = {}
        self._lock = threading.Lock()
        self._session_client: KazooClient | None = None
        self._session_lost = False
        self.states: dict[TopicPartition, tuple[PartitionState, int]] = {}
        self.missing: set[TopicPartition] = set()  # watched and read, but without a state znode
        self._next: set[TopicPartition] | None = None  # for the background reader (watch_in_background)
        self._worker: threading.Thread | None = None
        self._wake = threading.Event()

    def add_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def watch_in_background(self, partitions: Iterable[TopicPartition]) -> None:
        """watch() on this watcher's own thread: the caller (the registry's notifier, which also tells who is
        alive) returns at once; the latest set wins when several arrive while one is being read."""
        with self._lock:
            self._next = set(partitions)
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="partition-states", daemon=True)
                self._worker.start()
        self._wake.set()

    def _work(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                wanted, self._next = self._next, None
            if wanted is None:
                continue
            try:
                self.watch(wanted)
            except Exception as e:
                log.warning("reading partition states failed (%s); retrying", e)
                with self._lock:
                    self._watched -= {tp for tp in wanted if tp not in self.states and tp not in self.missing}
                    if self._next is None:
                        self._next = wanted
                time.sleep(1.0)
                self._wake.set()

    def watch(self, partitions: Iterable[TopicPartition]) -> None:
        """Watch exactly ``partitions`` from now on (new ones are read at once, in bulk; dropped ones are
        forgotten). Returns once the new ones' states are known."""
        wanted = set(partitions)
        with self._lock:
            added = wanted - self._watched
            for tp in self._watched - wanted:
                self.states.pop(tp, None)
                self.missing.discard(tp)
                self._paths.pop(partition_state_path(*tp), None)
            self._watched = wanted
            for tp in added:
                self._paths[partition_state_path(*tp)] = tp
        client = self._client_getter()
        if self._session_client is not client:
            self._session_client = client
            client.add_listener(self._on_session)
        self._read_all(client, sorted(added))

    def record(self, tp: TopicPartition, state: PartitionState, version: int) -> None:
        """A state this process itself just wrote (its watch event follows; an older one never wins)."""
        with self._lock:
            current = self.states.get(tp)
            if tp in self._watched and (current is None or current[1] < version):
                self.states[tp] = (state, version)
                self.missing.discard(tp)

    # ------------------------------------------------------------------ reads
    def _read_all(self, client: KazooClient, tps: list[TopicPartition]) -> None:
        """Send every read, then take the answers in order (they arrive in order on one session). Reads lost
        with the connection are sent again once it is back (bounded), as kazoo's retry would."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        while tps:
            pending = [(tp, client.get_async(partition_state_path(*tp), watch=self._on_event)) for tp in tps]
            failed: list[TopicPartition] = []
            error: Exception | None = None
            if pending:  # the last answer first: this thread then wakes once, not once per answer
                pending[-1][1].wait(max(deadline - time.monotonic(), 0.1))
            for tp, result in pending:
                try:
                    data, stat = result.get(timeout=max(deadline - time.monotonic(), 0.1))
                except NoNodeError:
                    self._watch_missing(client, tp)
                    continue
                except Exception as e:  # connection loss, session expiry, timeout
                    failed.append(tp)
                    error = e
                    continue
                self._deliver(tp, data, stat)
            tps = [tp for tp in failed if tp in self._watched]
            if tps and time.monotonic() >= deadline:
                self._session_lost = True  # read them all again at the next (re)connection
                raise TimeoutError(f"{len(tps)} partition states unread: {error}")
            if tps:
                time.sleep(0.2)

    def _read_one(self, tp: TopicPartition) -> None:
        """Re-read after a watch fired, without blocking (the answer is handled on kazoo's thread)."""
        client = self._client_getter()
        result = client.get_async(partition_state_path(*tp), watch=self._on_event)

        def done(res: IAsyncResult) -> None:
            try:
                data, stat = res.get_nowait()
            except NoNodeError:
                self._watch_missing(client, tp)
                return
            except Exception as e:  # connection loss: the reconnect re-arms watches or re-reads all
                log.debug("re-reading the state of %s-%d failed: %s", tp[0], tp[1], e)
                return
            self._deliver(tp, data, stat)

        result.rawlink(done)

    def _watch_missing(self, client: KazooClient, tp: TopicPartition) -> None:
        """The znode is missing: forget its state, and watch for its creation."""
        self._deliver(tp, None, None)
        result = client.exists_async(partition_state_path(*tp), watch=self._on_event)

        def done(res: IAsyncResult) -> None:
            try:
                if res.get_nowait() is not None:  # created between the two reads
                    self._read_one(tp)
            except Exception as e:
                log.debug("watching the state of %s-%d failed: %s", tp[0], tp[1], e)

        result.rawlink(done)

    def _on_event(self, event: WatchedEvent) -> None:
        if event.type == EventType.NONE or event.path is None:
            return  # the session ended: its watches are gone; _on_session re-reads everything
        tp = self._paths.get(event.path)
        if tp is not None and tp in self._watched:
            self._read_one(tp)

    def _on_session(self, state: str) -> None:
        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            # A new session has none of the old watches: read (and watch) everything again, off kazoo's thread.
            threading.Thread(target=self._reread, name="partition-states-reread", daemon=True).start()

    def _reread(self) -> None:
        try:
            self._read_all(self._client_getter(), sorted(self._watched))
        except Exception as e:
            log.warning("re-reading the partition states after a new session failed: %s", e)
            self._session_lost = True  # tried again at the next reconnect

    # ------------------------------------------------------------------ delivery
    def _deliver(self, tp: TopicPartition, data: bytes | None, stat: ZnodeStat | None) -> None:
        state: PartitionState | None = None
        version = -1
        if data is not None and stat is not None:
            try:
                state = PartitionState.decode(data, f"state of {tp[0]}-{tp[1]}")
                version = stat.version
            except ValueError as e:
                log.error("ignoring an unreadable partition state: %s", e)
        with self._lock:
            if tp not in self._watched:
                return  # forgotten meanwhile
            if state is None:
                self.states.pop(tp, None)
                self.missing.add(tp)
            else:
                self.missing.discard(tp)
                current = self.states.get(tp)
                if current is not None and current[1] > version:
                    return  # a newer state is already recorded (our own write, or a later read)
                self.states[tp] = (state, version)
        for listener in list(self._listeners):
            try:
                listener(tp, state, version)
            except Exception:
                log.exception("partition state listener %r failed", listener)
