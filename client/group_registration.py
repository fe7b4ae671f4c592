"""GroupRegistration: a consumer's ephemeral node under ``/consumers/<g>/ids``, which carries its subscription."""

from __future__ import annotations

import time

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ferry.client import group_dirs as dirs
from ferry.client.errors import ClientError
from ferry.client.partition_ownership import session_id
from ferry.client.subscription import Subscription


class GroupRegistration:
    """Membership in the group: every member reads the others' registrations to divide the partitions, and a
    registration that vanishes (its session ended) makes them rebalance."""

    def __init__(self, zk: KazooClient, group: str, consumer_id: str, session_timeout_s: float) -> None:
        self.zk = zk
        self.group = group
        self.consumer_id = consumer_id
        self.session_timeout_s = session_timeout_s

    def register(self, subscription: Subscription) -> None:
        """Create our ephemeral registration; a node of a dead earlier session with our id is waited out."""
        path = dirs.id_path(self.group, self.consumer_id)
        data = subscription.encode()
        deadline = time.monotonic() + self.session_timeout_s + 2.0
        while True:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                try:
                    _, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == session_id(self.zk):
                    self.zk.set(path, data)
                    return
                if time.monotonic() > deadline:
                    raise ClientError(f"consumer id {self.consumer_id!r} is already registered in group "
                                      f"{self.group!r} by another live session") from None
                time.sleep(0.2)

    def delete(self) -> None:
        path = dirs.id_path(self.group, self.consumer_id)
        try:
            _, stat = self.zk.get(path)
            if stat.ephemeralOwner == session_id(self.zk):
                self.zk.delete(path, version=stat.version)
        except NoNodeError:
            pass
