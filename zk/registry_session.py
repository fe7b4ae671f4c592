"""The registry's one kazoo session, rooted at the cluster's chroot.

kazoo forbids blocking calls inside its state listener, so reconnections are only *reported* to the
registry's parts (they set an event and do the work on their own threads).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState

from ferry.zk.errors import RegistryNotStartedError
from ferry.zk.kazoo_client import connect
from ferry.zk.zk_connect import ZkConnect
from ferry.zk.zk_tls import ZkTlsConfig
from ferry.zk.znodes import BROKER_IDS_PATH, BROKER_TOPICS_PATH

log = logging.getLogger("ferry.zk.cluster_registry")  # one logger for the registry's parts


class RegistrySession:
    """Opens and closes the kazoo session; tells listeners when a (new) connection is up."""

    def __init__(self, zk: ZkConnect, timeout: float, create: bool, tls: ZkTlsConfig | None = None) -> None:
        self.zk = zk
        self.tls = tls  # None: the process's settings (kazoo_client.tls_settings)
        self.timeout = timeout  # connect timeout and ZooKeeper session timeout, seconds
        self.create = create  # False: a read-only look (a missing chroot is an error; nothing is created)
        self._client: KazooClient | None = None
        self._lost = False
        self._connected_listeners: list[Callable[[], None]] = []

    def on_connected(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` on kazoo's thread after every (re)connection; it must not block."""
        self._connected_listeners.append(listener)

    @property
    def started(self) -> bool:
        return self._client is not None

    def start(self) -> None:
        client = connect(self.zk, timeout=self.timeout, create_chroot=self.create, tls=self.tls)
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

    def stop(self) -> None:
        """Close the session: ZooKeeper deletes its ephemeral nodes at once."""
        client = self._client
        if client is None:
            return
        client.remove_listener(self._on_state)
        try:
            client.stop()
        finally:
            client.close()
            self._client = None

    @property
    def connected(self) -> bool:
        """True while the session's connection to ZooKeeper is up."""
        return self._client is not None and self._client.connected

    @property
    def client(self) -> KazooClient:
        """The kazoo client; RegistryNotStartedError before start() and after stop()."""
        if self._client is None:
            raise RegistryNotStartedError("ClusterRegistry is not started (call start() first)")
        return self._client

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: no blocking calls here.
        if state == KazooState.LOST:
            self._lost = True
            log.warning("ZooKeeper session to %s lost", self.zk)
        elif state == KazooState.CONNECTED:
            if self._lost:
                self._lost = False
                log.info("ZooKeeper session to %s re-established", self.zk)
            for listener in self._connected_listeners:
                listener()
