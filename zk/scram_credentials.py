"""The SCRAM user store in ZooKeeper, in Kafka's layout: ``/config/users/<name>`` holds
``{"version":1,"config":{"SCRAM-SHA-512":"salt=..,stored_key=..,server_key=..,iterations=4096"}}`` (one entry per
mechanism). Never a password: ``ferry users`` writes salted credentials (wire/scram.py), brokers read them when a
client authenticates (SCRAM, and PLAIN checked against the same credentials)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ferry.wire.scram import MECHANISMS, ScramCredential
from ferry.zk.change_notifications import entity_config
from ferry.zk.kazoo_client import connect
from ferry.zk.zk_credentials import private_acl_of

USERS_PATH = "/config/users"
USERS_PARENT = "/config"
_NAME = re.compile(r"^[A-Za-z0-9._@-]{1,249}$")
_ATTEMPTS = 20


def user_path(name: str) -> str:
    return f"{USERS_PATH}/{name}"


def check_user_name(name: str) -> str:
    """A user name usable as a znode and a principal (letters, digits, . _ @ -); ValueError otherwise."""
    if not _NAME.match(name) or name in (".", ".."):
        raise ValueError(f"user name {name!r}: use 1-249 letters, digits, '.', '_', '@' or '-'")
    return name


class ScramCredentialStore:
    """Reads and writes the salted credentials of SCRAM users (a started, chrooted kazoo client)."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client

    def get(self, name: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for ``mechanism``; None for an unknown user or mechanism."""
        try:
            check_user_name(name)
            data, _ = self.client.get(user_path(name))
        except (NoNodeError, ValueError):
            return None
        text = entity_config(data).get(mechanism)
        if not text:
            return None
        try:
            return ScramCredential.decode(text)
        except ValueError:
            return None

    def users(self) -> dict[str, list[str]]:
        """user name -> the SCRAM mechanisms it has credentials for."""
        try:
            names = self.client.get_children(USERS_PATH)
        except NoNodeError:
            return {}
        out: dict[str, list[str]] = {}
        for name in sorted(names):
            try:
                data, _ = self.client.get(user_path(name))
            except NoNodeError:
                continue
            mechanisms = sorted(m for m in entity_config(data) if m in MECHANISMS)
            if mechanisms:
                out[name] = mechanisms
        return out

    def set(self, name: str, mechanism: str, credential: ScramCredential) -> None:
        """Add or replace the user's credential for ``mechanism`` (other config entries are kept)."""
        check_user_name(name)
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        self._change(name, lambda cfg: {**cfg, mechanism: credential.encode()}, create=True)

    def remove(self, name: str, mechanism: str | None = None) -> bool:
        """Remove one mechanism's credential (or all); the znode goes with its last entry. False if absent."""
        check_user_name(name)
        removed = []

        def change(cfg: dict[str, str]) -> dict[str, str]:
            gone = [m for m in cfg if m in MECHANISMS and (mechanism is None or m == mechanism)]
            removed[:] = gone
            return {k: v for k, v in cfg.items() if k not in gone}

        self._change(name, change, create=False)
        return bool(removed)

    def _change(self, name: str, change, create: bool) -> None:
        path = user_path(name)
        for _ in range(_ATTEMPTS):
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                if not create:
                    return
                new = change({})
                try:  # secrets: not even readable to others when ZooKeeper is secured (zk_credentials.py)
                    self.client.ensure_path(USERS_PARENT)
                    self.client.create(path, _encode(new), makepath=True, acl=private_acl_of(self.client))
                    return
                except NodeExistsError:
                    continue
            new = change(entity_config(data))
            try:
                if new:
                    self.client.set(path, _encode(new), version=stat.version)
                else:
                    self.client.delete(path, version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue
        raise RuntimeError(f"{path} kept changing; try again")




def _encode(config: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": config}, sort_keys=True).encode()


class ScramAuthenticator:
    """Checks a user name and password against the cluster's SCRAM users (HTTP basic authentication of the
    registry, the dashboard and /metrics: one user store for Kafka clients and browsers). A success is
    remembered for a minute, so a page's many requests do not each derive a key."""

    CACHE_S = 60.0

    def __init__(self, zookeeper: str, timeout: float = 10.0) -> None:
        self._zookeeper = zookeeper
        self._timeout = timeout
        self._client: KazooClient | None = None
        self._ok: dict[tuple[str, bytes], float] = {}
        self._lock = threading.Lock()

    def _store(self) -> ScramCredentialStore:
        with self._lock:
            if self._client is None:
                self._client = connect(self._zookeeper, timeout=self._timeout, create_chroot=False)
            return ScramCredentialStore(self._client)

    def authenticate(self, username: str, password: str) -> bool:
        key = (username, hashlib.sha256(password.encode()).digest())
        now = time.monotonic()
        if self._ok.get(key, 0.0) > now:
            return True
        store = self._store()
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            credential = store.get(username, mechanism)
            if credential is not None and credential.matches(mechanism, password):
                with self._lock:
                    if len(self._ok) > 10_000:
                        self._ok.clear()
                    self._ok[key] = now + self.CACHE_S
                return True
        return False

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.stop()
                self._client.close()
                self._client = None
