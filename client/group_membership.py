"""A consumer's registration in its group and the ZooKeeper watches that trigger rebalances, across session loss."""

from __future__ import annotations

import logging
import time

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from ferry.client import group_dirs as dirs
from ferry.client.errors import ClientError

log = logging.getLogger("ferry.consumer")


class GroupMembership:
    """A consumer's registration in its group and the ZooKeeper watches that trigger rebalances, across session loss. (a part of ConsumerConnector)."""

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

    def _pause(self) -> None:
        """Cut off from ZooKeeper: our session may expire without us hearing of it, and then someone else
        owns our partitions. Stop delivering until we are connected again (ownership is kept; the rebalance
        after reconnecting commits what was taken, releases and claims again)."""
        log.warning("%s: disconnected from ZooKeeper; pausing", self.consumer_id)
        self._stop_delivering(forget_ownership=False)

    def _stop_delivering(self, forget_ownership: bool) -> None:
        """Stop fetching and drop what the streams hold: partitions we may no longer own must not be handed
        out (cut off, or expired: then ZooKeeper has dropped our ownership too, and we forget it)."""
        self._fetching = False
        self._fetcher.stop_fetching()
        with self._lock:
            for info in self._owned.values():
                info.valid = False
            for s in self._all_streams():
                s.clear()
            if forget_ownership:
                self._owned = {}
                self._pending_claims = set()

    def _recover_session(self) -> None:
        """Our session expired: ZooKeeper dropped our registration and ownership, and others may already
        own our partitions. Stop at once, without committing, then re-register and rebalance."""
        log.warning("%s: ZooKeeper session expired; re-registering", self.consumer_id)
        self._stop_delivering(forget_ownership=True)
        while not self._connected.wait(0.5):
            if self._closed.is_set():
                return
        with self._lock:
            self._session_lost = False
        self._register()
        self._request_rebalance()
