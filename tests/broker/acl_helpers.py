"""Helpers of the ACL tests: a broker with the authorizer on, ACLs written to ZooKeeper as `ferry acls --zookeeper`
writes them, and bounded waits for a broker's cache to follow."""

from __future__ import annotations

import time
from collections.abc import Callable

from ferry.wire.acl_binding import AccessControlEntry, AclBinding, AclBindingFilter, ResourcePattern
from ferry.wire.protocol.acl_types import AclOperation, AclPermissionType, PatternType, ResourceType
from ferry.zk import connect
from ferry.zk.acl_store import add_acls, remove_acls

AUTHORIZER_ARGS = ("--override", "authorizer.class.name=ferry", "--flush-ms", "10",
                   "--override", "group.initial.rebalance.delay.ms=100")
ANON = "User:ANONYMOUS"


def binding(rtype: ResourceType, name: str, op: AclOperation, allow: bool = True, principal: str = ANON,
            pattern: PatternType = PatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(
        principal, host, op, AclPermissionType.ALLOW if allow else AclPermissionType.DENY))


def grant(zk: str, *bindings: AclBinding) -> None:
    client = connect(zk)
    try:
        add_acls(client, bindings)
    finally:
        client.stop()
        client.close()


def revoke(zk: str, *bindings: AclBinding) -> None:
    client = connect(zk)
    try:
        remove_acls(client, [AclBindingFilter(b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type,
                                              b.entry.principal, b.entry.host, b.entry.operation, b.entry.permission)
                             for b in bindings])
    finally:
        client.stop()
        client.close()


def eventually(check: Callable[[], object], timeout: float = 15.0, interval: float = 0.2) -> object:
    """The first truthy result of ``check`` within ``timeout`` (AssertionError with the last one otherwise)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"not true within {timeout}s: last {last!r}")
