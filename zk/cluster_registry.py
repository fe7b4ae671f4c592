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

from kazoo.client import KazooClient, KazooState

from ferry.zk.broker_registration import BrokerRegistration
from ferry.zk.errors import (
    RegistryNotStartedError,
)
from ferry.zk.kazoo_client import connect
from ferry.zk.registry_notifier import BrokersCallback, RegistryNotifier, TopicsCallback  # noqa: F401
from ferry.zk.topic_admin import MAX_PARTITIONS, TopicAdmin  # noqa: F401
from ferry.zk.zk_connect import ZkConnect
from ferry.zk.znodes import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    BrokerInfo,
)

log = logging.getLogger(__name__)




class ClusterRegistry(TopicAdmin, RegistryNotifier, BrokerRegistration):
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













def _describe_node(broker_id: int, data: bytes) -> str:
    try:
        return BrokerInfo.decode(broker_id, data).address
    except ValueError:
        return "unreadable registration"
