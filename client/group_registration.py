"""GroupRegistration: a consumer's ephemeral node under ``/consumers/<g>/ids``, which carries its subscription
and who holds it (host and process id), so that a second process started with the same member id is refused
naming the holder, without ever acting as that member.

A node of another session with our id is either a live holder (refused) or a killed process's session that has
not expired yet (waited out: a restart after kill -9 keeps its member id). A holder on this host whose process
still runs is known live at once; one elsewhere is known live only when its session outlasts the session
timeout, so it is refused then.
"""

from __future__ import annotations

import json
import os
import socket
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ferry.client import group_dirs as dirs
from ferry.client.errors import ClientError
from ferry.client.partition_ownership import session_id
from ferry.client.subscription import Subscription


class MemberIdConflictError(ClientError, RuntimeError):
    """Another live process holds our member id in the group: this one must not join as it (a runtime conflict,
    exit 1, as a broker id held by another live broker)."""


def holder_of(data: bytes) -> tuple[str, int | None]:
    """(host, pid) a registration names; ("unknown host", None) for one written without them."""
    try:
        doc = json.loads(data or b"")
        pid = doc.get("pid")
        return str(doc.get("host") or "unknown host"), pid if isinstance(pid, int) else None
    except (ValueError, AttributeError):
        return "unknown host", None


def running_here(host: str, pid: int | None) -> bool:
    """Whether (host, pid) is another process of this machine that is running."""
    if pid is None or host != socket.gethostname() or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def refuse_if_held_here(zk: KazooClient, group: str, consumer_id: str) -> None:
    """Before a process does anything as ``consumer_id``: MemberIdConflictError when another running process of
    this host holds it (read only; :meth:`GroupRegistration.register` decides every other case)."""
    try:
        held, _ = zk.get(dirs.id_path(group, consumer_id))
    except NoNodeError:
        return
    host, pid = holder_of(held)
    if running_here(host, pid):
        raise MemberIdConflictError(_held_message(group, consumer_id, host, pid))


def _held_message(group: str, consumer_id: str, host: str, pid: int | None) -> str:
    return (f"consumer id {consumer_id!r} is held in group {group!r} by a live member at "
            f"{host}{f' (pid {pid})' if pid is not None else ''}; stop it or choose another id")


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
        doc = json.loads(subscription.encode())
        doc.update(host=socket.gethostname(), pid=os.getpid())
        data = json.dumps(doc, sort_keys=True).encode()
        deadline = time.monotonic() + self.session_timeout_s + 2.0
        while True:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                try:
                    held, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == session_id(self.zk):
                    self.zk.set(path, data)
                    return
                host, pid = holder_of(held)
                if running_here(host, pid) or time.monotonic() > deadline:
                    raise MemberIdConflictError(_held_message(self.group, self.consumer_id, host, pid)) from None
                time.sleep(0.2)

    def delete(self) -> None:
        path = dirs.id_path(self.group, self.consumer_id)
        try:
            _, stat = self.zk.get(path)
            if stat.ephemeralOwner == session_id(self.zk):
                self.zk.delete(path, version=stat.version)
        except NoNodeError:
            pass
