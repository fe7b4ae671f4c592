"""This broker's ephemeral registration under /brokers/ids, kept across session expiries.

The *session keeper* thread re-creates the node after a session expiry (kazoo reports LOST, then
reconnects with a new session whose ephemerals are empty) or when someone deletes it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from ferry.zk.errors import BrokerIdConflictError
from ferry.zk.kazoo_client import TRANSIENT_ERRORS as _TRANSIENT
from ferry.zk.registry_session import RegistrySession
from ferry.zk.wakeable_thread import WakeableThread
from ferry.zk.znodes import BrokerInfo, Endpoint, broker_path

log = logging.getLogger("ferry.zk.cluster_registry")  # one logger for the registry's parts


def _describe_node(broker_id: int, data: bytes) -> str:
    try:
        return BrokerInfo.decode(broker_id, data).address
    except ValueError:
        return "unreadable registration"


class BrokerRegistration:
    """Owns this broker's registration and the keeper thread that re-creates its node."""

    def __init__(self, session: RegistrySession) -> None:
        self._session = session
        self._registration: BrokerInfo | None = None
        self._lock = threading.Lock()
        self._keeper = WakeableThread("zk-session-keeper")

    @property
    def registration(self) -> BrokerInfo | None:
        return self._registration

    def start(self) -> None:
        self._keeper.start(self._keep_session)

    def stop(self, timeout: float) -> None:
        """Forget the registration and end the keeper (closing the session then deletes the node)."""
        self._keeper.request_stop()  # first: a keeper waiting out a stale node gives up and frees the lock
        with self._lock:
            self._registration = None
        self._keeper.stop(timeout)

    def wake(self) -> None:
        """A new connection: check the node (never blocks; called on kazoo's thread)."""
        self._keeper.wake()

    def register(
        self, broker_id: int, host: str, port: int, datacenter: str = "", wait_for_stale: float | None = None,
        endpoints: tuple[Endpoint, ...] = (), ferry_version: str = "", native: str = "",
    ) -> BrokerInfo:
        """Create the ephemeral ``/brokers/ids/<id>``; it is re-created after a session expiry.

        ``ferry_version`` and ``native`` (what the broker runs: its release and native parts) are written
        into the registration beside Kafka's fields, for `ferry topics describe` and the dashboard.

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
        info = BrokerInfo(id=broker_id, host=host, port=port, datacenter=datacenter or "", endpoints=endpoints,
                          ferry_version=ferry_version, native=native)
        wait = self._session.timeout + 2.0 if wait_for_stale is None else wait_for_stale
        with self._lock:
            self._create_node(info, wait)
            self._registration = info
        log.info("registered broker %d at %s (datacenter %r, ferry %s, %s) in %s", broker_id, info.address,
                 datacenter, ferry_version or "version not given", native or "native parts not given",
                 self._session.zk)
        return info

    def ensure_free(self, info: BrokerInfo, holder_alive: Callable[[BrokerInfo], bool],
                    wait_for_stale: float | None = None) -> None:
        """Before a broker acts on the cluster as ``info.id`` (follower fetches, partition directories, a
        controlled shutdown): refuse at once when another live broker holds the id (its address answers), and
        otherwise wait for a stale registration (a killed process's session) to expire. A holder at our own
        address is our predecessor on this host (two processes cannot listen there): waited out too."""
        client = self._session.client
        path = broker_path(info.id)
        deadline = time.monotonic() + (self._session.timeout + 2.0 if wait_for_stale is None else wait_for_stale)
        warned = False
        while True:
            gone = threading.Event()
            try:
                data, stat = client.get(path, watch=lambda _event, gone=gone: gone.set())
            except NoNodeError:
                return
            if stat.ephemeralOwner == client.client_id[0]:
                return
            holder = BrokerInfo.decode(info.id, data)
            if holder.address != info.address and holder_alive(holder):
                raise BrokerIdConflictError(f"broker id {info.id} is held by a live broker at {holder.address}; "
                                            f"is another broker running with --id {info.id}?")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerIdConflictError(f"broker id {info.id} is still registered by another ZooKeeper session "
                                            f"({_describe_node(info.id, data)}) after waiting for it to expire")
            if not warned:
                log.warning("broker id %d is held by an older session at %s that does not answer; waiting up to "
                            "%.0f s for it to expire", info.id, holder.address, remaining)
                warned = True
            gone.wait(min(remaining, 1.0))

    def unregister(self) -> None:
        """Delete this broker's node (a clean shutdown says so before closing the session)."""
        with self._lock:
            info, self._registration = self._registration, None
            if info is None:
                return
            client = self._session.client
            if not client.connected:
                # A request would wait for a connection that may never come (ZooKeeper down): the node
                # is ephemeral, so ZooKeeper removes it when the session expires.
                log.warning("not connected to ZooKeeper: broker %d's registration goes when its session expires",
                            info.id)
                return
            try:
                _, stat = client.get(broker_path(info.id))
                if stat.ephemeralOwner == client.client_id[0]:
                    client.delete(broker_path(info.id), version=stat.version)
            except (NoNodeError, BadVersionError):
                pass

    def _create_node(self, info: BrokerInfo, wait_for_stale: float) -> None:
        client = self._session.client
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
            if remaining <= 0 or self._keeper.stopping:
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

    def _on_own_node_event(self, event: WatchedEvent) -> None:
        if event.type in (EventType.DELETED, EventType.CHANGED) and not self._keeper.stopping:
            self._keeper.wake()

    def _keep_session(self) -> None:
        while self._keeper.next_round():
            with self._lock:
                info = self._registration
                if info is None:
                    continue
                try:
                    self._create_node(info, wait_for_stale=self._session.timeout + 2.0)
                except _TRANSIENT:
                    self._keeper.wake()  # retry when connected again
                except BrokerIdConflictError as exc:
                    log.error("%s; will keep trying", exc)
                    self._keeper.wake()
                except Exception:
                    log.exception("re-registering broker %d failed; will retry", info.id)
                    self._keeper.wake()
            if self._keeper.woken:
                self._keeper.pause(0.5)
