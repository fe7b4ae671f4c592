"""ACLs in ZooKeeper, laid out as Kafka lays them out, so kafka-acls' znodes and ferry's are one format:

- literal patterns: ``/kafka-acl/<ResourceType>/<name>`` (``*`` is the wildcard name),
- prefixed patterns: ``/kafka-acl-extended/prefixed/<ResourceType>/<prefix>``,
- each znode: ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read",
  "host":"*"}]}``, written conditionally on its version (two writers never lose each other's change),
- every change also writes a sequential node under ``/kafka-acl-changes`` (literal, data ``Topic:name``) or
  ``/kafka-acl-extended-changes`` (prefixed, JSON), which is what brokers watch.

AclCache is a broker's copy: it reads every ACL at start, then again whenever a change notification appears
(a watch wakes its thread), and hands the authorizer an immutable AclSnapshot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ferry.wire.acl_binding import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    ResourcePattern,
    check_binding,
)
from ferry.wire.protocol.acl_types import (
    WILDCARD,
    PatternType,
    ResourceType,
    operation_named,
    permission_named,
)
from ferry.zk import change_notifications
from ferry.zk.errors import RegistryError

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
WRITE_ATTEMPTS = 20
_STORED_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID)


class AclStoreError(RegistryError):
    """An ACL that cannot be stored (the message says why)."""


# ---------------------------------------------------------------------------------------------- znode format

def znode_path(p: ResourcePattern) -> str:
    root = PREFIXED_ROOT if p.pattern_type == PatternType.PREFIXED else LITERAL_ROOT
    return f"{root}/{p.resource_type.title}/{p.name}"


def encode_entries(entries: Iterable[AccessControlEntry]) -> bytes:
    acls = [{"principal": e.principal, "permissionType": e.permission.title, "operation": e.operation.title,
             "host": e.host} for e in sorted(entries)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_entries(data: bytes) -> set[AccessControlEntry]:
    if not data:
        return set()
    doc = json.loads(data.decode("utf-8"))
    return {AccessControlEntry(a["principal"], a["host"], operation_named(a["operation"]),
                               permission_named(a["permissionType"])) for a in doc.get("acls", [])}


def _change_data(p: ResourcePattern) -> bytes:
    if p.pattern_type == PatternType.LITERAL:
        return f"{p.resource_type.title}:{p.name}".encode()
    return json.dumps({"version": 1, "resourceType": p.resource_type.title, "name": p.name,
                       "patternType": p.pattern_type.name}).encode()


# ---------------------------------------------------------------------------------------------- reads and writes

def read_all(client: KazooClient) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    """Every stored ACL, by resource pattern."""
    out: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
    for pattern_type, root in ((PatternType.LITERAL, LITERAL_ROOT), (PatternType.PREFIXED, PREFIXED_ROOT)):
        for rt in _STORED_TYPES:
            base = f"{root}/{rt.title}"
            try:
                names = client.get_children(base)
            except NoNodeError:
                continue
            for name in names:
                try:
                    data, _stat = client.get(f"{base}/{name}")
                except NoNodeError:
                    continue
                try:
                    entries = decode_entries(data)
                except (ValueError, KeyError, TypeError) as e:
                    log.error("ignoring unreadable ACL znode %s/%s: %s", base, name, e)
                    continue
                if entries:
                    out[ResourcePattern(rt, name, pattern_type)] = frozenset(entries)
    return out


def add_acls(client: KazooClient, bindings: Iterable[AclBinding]) -> None:
    """Store ``bindings`` (each checked first: AclStoreError says what is wrong); already stored ones are kept."""
    by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for b in bindings:
        why = check_binding(b)
        if why is None and "/" in b.pattern.name:
            why = f"resource name {b.pattern.name!r} contains '/', which a znode name cannot hold"
        if why:
            raise AclStoreError(why)
        by_pattern.setdefault(b.pattern, set()).add(b.entry)
    for pattern, entries in by_pattern.items():
        _update(client, pattern, lambda old, entries=entries: old | entries)


def remove_acls(client: KazooClient, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
    """Delete the stored bindings each filter matches; per filter, the bindings it deleted."""
    filters = list(filters)
    current = read_all(client)
    out: list[list[AclBinding]] = [[] for _ in filters]
    for pattern in current:
        hit = [(i, f) for i, f in enumerate(filters) if f.matches_pattern(pattern)]
        if not hit:
            continue

        def change(old: set[AccessControlEntry], hit=hit) -> set[AccessControlEntry]:
            return {e for e in old if not any(f.matches_entry(e) for _, f in hit)}

        removed = _update(client, pattern, change)
        for e in sorted(removed):
            for i, f in hit:
                if f.matches_entry(e):
                    out[i].append(AclBinding(pattern, e))
    return out


def _update(client: KazooClient, pattern: ResourcePattern,
            change: Callable[[set[AccessControlEntry]], set[AccessControlEntry]]) -> set[AccessControlEntry]:
    """Apply ``change`` to the pattern's stored entries (conditional write, retried on a race), then notify the
    brokers; returns the entries that went away."""
    path = znode_path(pattern)
    for _ in range(WRITE_ATTEMPTS):
        try:
            data, stat = client.get(path)
            old, version = decode_entries(data), stat.version
        except NoNodeError:
            old, version = set(), -1
        new = change(set(old))
        if new == old:
            return set()
        try:
            if version < 0:
                client.create(path, encode_entries(new), makepath=True)
            elif new:
                client.set(path, encode_entries(new), version=version)
            else:
                client.delete(path, version=version)
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue  # someone else wrote meanwhile: read again
        _notify(client, pattern)
        return old - new
    raise AclStoreError(f"ACLs of {pattern} changed concurrently {WRITE_ATTEMPTS} times; try again")


def _notify(client: KazooClient, pattern: ResourcePattern) -> None:
    root = LITERAL_CHANGES if pattern.pattern_type == PatternType.LITERAL else EXTENDED_CHANGES
    client.create(f"{root}/{CHANGE_PREFIX}", _change_data(pattern), sequence=True, makepath=True)


def purge_old_changes(client: KazooClient, now_s: float | None = None) -> int:
    """Delete ACL change notifications older than CHANGE_EXPIRATION_S (as Kafka does); the number deleted."""
    return change_notifications.purge_old_changes(client, (LITERAL_CHANGES, EXTENDED_CHANGES), now_s)


# ---------------------------------------------------------------------------------------------- a broker's copy

class AclSnapshot:
    """All ACLs at one moment, indexed for the authorizer: by type, literal names and prefixes."""

    def __init__(self, acls: dict[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        self.acls = acls
        self._literal: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        for p, entries in acls.items():
            index = self._prefixed if p.pattern_type == PatternType.PREFIXED else self._literal
            index.setdefault(p.resource_type, {})[p.name] = entries

    def matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The entries of every pattern applying to the resource: its literal name, ``*``, its prefixes."""
        out: list[AccessControlEntry] = []
        literal = self._literal.get(resource_type)
        if literal:
            out.extend(literal.get(name, ()))
            if name != WILDCARD:
                out.extend(literal.get(WILDCARD, ()))
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for prefix, entries in prefixed.items():
                if name.startswith(prefix):
                    out.extend(entries)
        return out

    def patterns_of(self, resource_type: ResourceType) -> list[tuple[ResourcePattern, frozenset[AccessControlEntry]]]:
        return [(p, e) for p, e in self.acls.items() if p.resource_type == resource_type]

    def bindings(self, f: AclBindingFilter) -> list[AclBinding]:
        return sorted(AclBinding(p, e) for p, entries in self.acls.items() if f.matches_pattern(p)
                      for e in entries if f.matches_entry(e))


EMPTY = AclSnapshot({})


class AclCache:
    """A broker's copy of every ACL, re-read when a change notification appears; ``generation`` counts reloads
    (the authorizer drops its memoised decisions when it moves)."""

    def __init__(self, client: Callable[[], KazooClient]) -> None:
        self._follower = change_notifications.ChangeFollower("acl-cache", client,
                                                             (LITERAL_CHANGES, EXTENDED_CHANGES), self._reload)
        self.snapshot: AclSnapshot = EMPTY
        self.generation = 0

    def start(self) -> None:
        """Read every ACL now (the broker serves with them loaded), then follow changes on a thread."""
        self._follower.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._follower.stop(timeout)

    def _reload(self, client: KazooClient) -> None:
        acls = read_all(client)
        if acls != self.snapshot.acls:
            self.snapshot = AclSnapshot(acls)
            self.generation += 1
            log.info("ACLs loaded: %d binding(s) on %d resource pattern(s)", sum(map(len, acls.values())), len(acls))
