"""Client quotas in ZooKeeper, in Kafka's layout (KIP-13, KIP-55), so kafka-configs' znodes and ferry's are one format:

- ``/config/clients/<client-id>``, ``/config/users/<user>``, ``/config/users/<user>/clients/<client-id>``, each
  ``{"version":1,"config":{"producer_byte_rate":"1048576"}}``; ``<default>`` names the default entity; names are
  URL-encoded (Kafka's Sanitizer) so any client id fits a znode name;
- a user's znode is shared with its SCRAM credentials (scram_credentials.py): only the quota keys are touched;
- every change writes ``/config/changes/config_change_<seq>`` ``{"version":2,"entity_path":"clients/<id>"}``,
  which every broker watches (QuotaConfigCache re-reads all quotas then).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from ferry.zk import change_notifications
from ferry.zk.change_notifications import entity_config
from ferry.zk.errors import RegistryError
from ferry.zk.zk_credentials import private_acl_of

log = logging.getLogger(__name__)

CLIENTS_PATH = "/config/clients"
USERS_PATH = "/config/users"
CHANGES_PATH = "/config/changes"
CHANGE_PREFIX = "config_change_"
DEFAULT = "<default>"  # the default entity's znode name (Kafka's ConfigEntityName.Default)
USER, CLIENT_ID = "user", "client-id"  # entity types, as DescribeClientQuotas/AlterClientQuotas name them
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
_ATTEMPTS = 20


class QuotaStoreError(RegistryError):
    """A quota that cannot be stored (the message says why)."""


@dataclass(frozen=True, order=True)
class QuotaEntity:
    """Who a quota applies to: a user, a client id, or both; a name of None is the default entity."""

    user: str | None = None  # None: no user component; DEFAULT: the default user
    client_id: str | None = None

    def path(self) -> str:
        if self.user is None:
            if self.client_id is None:
                raise QuotaStoreError("a quota entity needs a user, a client id or both")
            return f"{CLIENTS_PATH}/{_sanitize(self.client_id)}"
        base = f"{USERS_PATH}/{_sanitize(self.user)}"
        return base if self.client_id is None else f"{base}/clients/{_sanitize(self.client_id)}"

    def entity_path(self) -> str:
        """The path relative to /config, as change notifications name it."""
        return self.path()[len("/config/"):]

    def components(self) -> list[tuple[str, str | None]]:
        """(entity type, name) pairs as the protocol spells them (None: the default)."""
        out = []
        if self.user is not None:
            out.append((USER, None if self.user == DEFAULT else self.user))
        if self.client_id is not None:
            out.append((CLIENT_ID, None if self.client_id == DEFAULT else self.client_id))
        return out

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append(f"user {self.user!r}" if self.user != DEFAULT else "default user")
        if self.client_id is not None:
            parts.append(f"client-id {self.client_id!r}" if self.client_id != DEFAULT else "default client-id")
        return ", ".join(parts)


def _sanitize(name: str) -> str:
    if name == DEFAULT:
        return DEFAULT
    if not name:
        raise QuotaStoreError("an entity name cannot be empty (use the default entity instead)")
    return quote(name, safe="").replace("*", "%2A")


def check_quota(key: str, value: float) -> None:
    """QuotaStoreError unless ``key`` is a quota key and ``value`` a positive rate."""
    if key not in QUOTA_KEYS:
        raise QuotaStoreError(f"unknown quota key {key!r} (known: {', '.join(QUOTA_KEYS)})")
    if not value > 0:
        raise QuotaStoreError(f"quota {key}={value:g} must be positive")




def _quotas(cfg: Mapping[str, str]) -> dict[str, float]:
    out = {}
    for k in QUOTA_KEYS:
        if k in cfg:
            try:
                out[k] = float(cfg[k])
            except ValueError:
                log.error("ignoring unreadable quota %s=%r", k, cfg[k])
    return out


def _encode(config: Mapping[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(config)}, sort_keys=True).encode()


# ---------------------------------------------------------------------------------------------- reads and writes

def read_all(client: KazooClient) -> dict[QuotaEntity, dict[str, float]]:
    """Every stored quota, by entity (entities without a quota key are left out)."""
    out: dict[QuotaEntity, dict[str, float]] = {}

    def take(entity: QuotaEntity) -> None:
        try:
            data, _stat = client.get(entity.path())
        except NoNodeError:
            return
        q = _quotas(entity_config(data))
        if q:
            out[entity] = q

    for name in _children(client, CLIENTS_PATH):
        take(QuotaEntity(None, unquote(name)))
    for user in _children(client, USERS_PATH):
        take(QuotaEntity(unquote(user), None))
        for cid in _children(client, f"{USERS_PATH}/{user}/clients"):
            take(QuotaEntity(unquote(user), unquote(cid)))
    return out


def _children(client: KazooClient, path: str) -> list[str]:
    try:
        return client.get_children(path)
    except NoNodeError:
        return []


def alter(client: KazooClient, entity: QuotaEntity, set_: Mapping[str, float], remove: list[str]) -> None:
    """Set and remove quota keys of ``entity`` (other keys of its znode are kept), then notify the brokers."""
    for k, v in set_.items():
        check_quota(k, v)
    for k in remove:
        if k not in QUOTA_KEYS:
            raise QuotaStoreError(f"unknown quota key {k!r} (known: {', '.join(QUOTA_KEYS)})")
    path = entity.path()
    acl = private_acl_of(client) if path.startswith(USERS_PATH) else None
    for _ in range(_ATTEMPTS):
        try:
            data, stat = client.get(path)
            old, version = entity_config(data), stat.version
        except NoNodeError:
            old, version = {}, -1
        new = {k: v for k, v in old.items() if k not in remove}
        new.update({k: _number(v) for k, v in set_.items()})
        if new == old:
            return
        try:
            if version < 0:
                client.create(path, _encode(new), makepath=True, acl=acl)
            elif new:
                client.set(path, _encode(new), version=version)
            else:
                try:
                    client.delete(path, version=version)
                except NotEmptyError:  # a user znode with per-client quotas under it stays, empty
                    client.set(path, _encode(new), version=version)
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue
        notify(client, entity)
        return
    raise QuotaStoreError(f"quotas of {entity} changed concurrently {_ATTEMPTS} times; try again")


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def notify(client: KazooClient, entity: QuotaEntity) -> None:
    doc = {"version": 2, "entity_path": entity.entity_path()}
    client.create(f"{CHANGES_PATH}/{CHANGE_PREFIX}", json.dumps(doc).encode(), sequence=True, makepath=True)


def purge_old_changes(client: KazooClient, now_s: float | None = None) -> int:
    """Delete quota change notifications older than CHANGE_EXPIRATION_S (as Kafka does); the number deleted."""
    return change_notifications.purge_old_changes(client, (CHANGES_PATH,), now_s)


# ---------------------------------------------------------------------------------------------- a broker's copy

class QuotaConfigCache:
    """A broker's copy of every client quota, re-read when a change notification appears; ``on_change`` gets each
    new copy (the quota managers swap it in: changes take effect live)."""

    def __init__(self, client: Callable[[], KazooClient],
                 on_change: Callable[[dict[QuotaEntity, dict[str, float]]], None]) -> None:
        self._on_change = on_change
        self._follower = change_notifications.ChangeFollower("quota-config", client, (CHANGES_PATH,), self._reload)
        self.quotas: dict[QuotaEntity, dict[str, float]] = {}

    def start(self) -> None:
        """Read every quota now (the broker serves with them loaded), then follow changes on a thread."""
        self._follower.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._follower.stop(timeout)

    def _reload(self, client: KazooClient) -> None:
        quotas = read_all(client)
        if quotas != self.quotas:
            self.quotas = quotas
            self._on_change(quotas)
            log.info("client quotas loaded: %d entit%s", len(quotas), "y" if len(quotas) == 1 else "ies")
