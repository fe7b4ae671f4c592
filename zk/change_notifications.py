"""Kafka's config-change notifications and entity config znodes, shared by the ACL store and the client quotas.

A change is announced by a sequential znode under a changes path; every broker watches it and re-reads. The
notifications are kept CHANGE_EXPIRATION_S and then deleted by whoever writes after that, as Kafka does, so the
path does not grow without end. An entity's znode holds ``{"version": 1, "config": {...}}`` (SCRAM credentials
and quotas share a user's znode)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError
from kazoo.protocol.states import KazooState

from ferry.zk.kazoo_client import TRANSIENT_ERRORS
from ferry.zk.wakeable_thread import WakeableThread

log = logging.getLogger(__name__)

CHANGE_EXPIRATION_S = 15 * 60
PURGE_INTERVAL_S = 60


def purge_old_changes(client: KazooClient, roots: Iterable[str], now_s: float | None = None) -> int:
    """Delete the notifications under ``roots`` older than CHANGE_EXPIRATION_S; the number deleted."""
    now_ms = (time.time() if now_s is None else now_s) * 1000
    deleted = 0
    for root in roots:
        try:
            children = client.get_children(root)
        except NoNodeError:
            continue
        for child in sorted(children):
            stat = client.exists(f"{root}/{child}")
            if stat is None or now_ms - stat.ctime < CHANGE_EXPIRATION_S * 1000:
                continue
            try:
                client.delete(f"{root}/{child}")
                deleted += 1
            except (NoNodeError, NotEmptyError):
                pass
    return deleted


def entity_config(data: bytes | None) -> dict[str, str]:
    """The ``config`` map of an entity znode's data ({} when there is none or it does not parse)."""
    try:
        doc = json.loads(data or b"{}")
    except ValueError:
        return {}
    cfg = doc.get("config") if isinstance(doc, dict) else None
    return {str(k): str(v) for k, v in cfg.items()} if isinstance(cfg, dict) else {}


class ChangeFollower:
    """A broker's way of following the notifications under ``roots`` (the ACL cache's and the quota cache's):
    ``reload(client)`` once at start, then on a thread whenever a notification appears or the session connects
    again (its watches may be gone); old notifications purged once a minute. The caller's ``reload`` owns what
    is read and kept."""

    def __init__(self, name: str, client: Callable[[], KazooClient], roots: tuple[str, ...],
                 reload: Callable[[KazooClient], None]) -> None:
        self._client = client
        self._roots = roots
        self._reload = reload
        self._thread = WakeableThread(name)
        self._listening: KazooClient | None = None

    def start(self) -> None:
        """Read now (the broker serves with it loaded), then follow the changes on the thread."""
        client = self._client()
        for root in self._roots:
            client.ensure_path(root)
        self._read(client)
        client.add_listener(self._on_state)
        self._listening = client
        self._thread.start(self._loop)

    def stop(self, timeout: float = 2.0) -> None:
        if self._listening is not None:
            self._listening.remove_listener(self._on_state)
            self._listening = None
        self._thread.stop(timeout)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:  # the watches may be gone: read again
            self._thread.wake()

    def _watch(self, _event: object) -> None:
        self._thread.wake()

    def _read(self, client: KazooClient) -> None:
        for root in self._roots:
            client.get_children(root, watch=self._watch)  # armed before the read: no change is missed
        self._reload(client)

    def _loop(self) -> None:
        last_purge = 0.0
        while self._thread.next_round():
            try:
                client = self._client()
                self._read(client)
                if time.monotonic() - last_purge > PURGE_INTERVAL_S:
                    last_purge = time.monotonic()
                    purge_old_changes(client, self._roots)
            except TRANSIENT_ERRORS:
                self._thread.pause(0.2)  # the reconnection wakes us
            except Exception:
                log.exception("%s: reading from ZooKeeper failed; retrying", self._thread.name)
                self._thread.pause(1.0)
                self._thread.wake()
