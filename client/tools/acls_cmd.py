"""`ferry acls add|list|remove`: the brokers' ACLs (docs/acls.md), spelled as Kafka's kafka-acls spells them:

    ferry acls add --allow-principal User:mirror --operation Read --topic '*' --zookeeper HOST:PORT/CHROOT
    ferry acls list --topic events --bootstrap-server HOST:PORT
    ferry acls remove --deny-principal User:bob --operation Write --topic logs. --resource-pattern-type prefixed

With ``--zookeeper`` the ACL znodes are written directly (as kafka-acls' old ZooKeeper mode; the brokers follow
through the change notifications); with ``--bootstrap-server`` through a broker's CreateAcls / DescribeAcls /
DeleteAcls, which needs an authorizer on it and Alter (Describe to list) on the cluster for this client.
Every combination of the principals, operations and resources given is one binding, as in kafka-acls.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable
from typing import TypeVar

from ferry.wire.acl_binding import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    ResourcePattern,
    check_binding,
)
from ferry.wire.broker_connection import BrokerConnection
from ferry.wire.client_config import ClientConfig
from ferry.wire.connection_errors import ClientError
from ferry.wire.protocol import create_acls, delete_acls, describe_acls
from ferry.wire.protocol.acl_types import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    operation_named,
)
from ferry.wire.protocol.errors import error_name
from ferry.zk import connect as zk_connect
from ferry.zk.acl_store import AclSnapshot, add_acls, read_all, remove_acls
from ferry.zk.cli_args import (
    UsageError,
    add_client_config_argument,
    add_json_argument,
    add_zookeeper_argument,
    client_config,
    quiet_zookeeper_logs,
)

T = TypeVar("T")
_O = AclOperation
# kafka-acls' table of the operations each resource type has
VALID_OPERATIONS = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                         _O.ALTER, _O.ALL),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.ALL),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
                           _O.ALTER, _O.DESCRIBE, _O.ALL),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE, _O.ALL),
}
PATTERN_TYPES = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED, "any": PatternType.ANY,
                 "match": PatternType.MATCH}


DESCRIPTION = ("The ACLs the brokers authorize requests with (authorizer.class.name=ferry), stored in ZooKeeper as "
               "Kafka stores them. Each principal x operation x resource given is one ACL binding.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add ACLs", description="Add an ACL binding for every principal x "
                             "operation x resource given.")
    lst = actions.add_parser("list", help="list ACLs", description="List the ACLs (of the resources given; "
                             "all without).")
    remove = actions.add_parser("remove", help="remove ACLs", description="Remove the ACLs matching the "
                                "resources, principals, operations and hosts given (a flag left out matches all).")
    for p in (add, lst, remove):
        where = p.add_mutually_exclusive_group()
        add_zookeeper_argument(where, "write and read the ACL znodes directly")
        where.add_argument("--bootstrap-server", metavar="HOST:PORT", help="through a broker's ACL APIs instead")
        add_client_config_argument(p, "--bootstrap-server's broker")
        p.add_argument("--topic", action="append", default=[], metavar="T", help="a topic (or * ; repeatable)")
        p.add_argument("--group", action="append", default=[], metavar="G", help="a consumer group (or *)")
        p.add_argument("--transactional-id", action="append", default=[], metavar="ID", help="a transactional id")
        p.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
        p.add_argument("--resource-pattern-type", default=None, choices=sorted(PATTERN_TYPES),
                       help="literal (default for add) or prefixed; list/remove also take any (their default) "
                            "and match (every ACL that applies to the resource named)")
        p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="connect timeout (default 10)")
    for p in (add, remove):
        p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                       help="principal to allow, e.g. User:mirror or User:* (repeatable)")
        p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                       help="principal to deny (repeatable); a Deny wins over any Allow")
        p.add_argument("--operation", action="append", default=[], metavar="OP",
                       help="Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs, "
                            "IdempotentWrite, ClusterAction or All (repeatable)")
        p.add_argument("--host", action="append", default=[], metavar="IP",
                       help="client address the ACL applies to (default: * for add, any for remove)")
    add.add_argument("--producer", action="store_true",
                     help="kafka-acls' convenience: Write, Describe, Create on the topics (Write, Describe on the "
                          "transactional ids) for the --allow-principal principals")
    add.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster too")
    add.add_argument("--consumer", action="store_true",
                     help="kafka-acls' convenience: Read, Describe on the topics and Read on the --group")
    lst.add_argument("--principal", metavar="TYPE:NAME", help="only the ACLs of this principal")
    add_json_argument(lst)


def run(args: argparse.Namespace) -> int:
    """Errors are raised: ferry/cli_runner.py turns them into one line and the exit code."""
    quiet_zookeeper_logs()
    if not args.zookeeper and not args.bootstrap_server:
        raise UsageError("--zookeeper HOST:PORT/CHROOT or --bootstrap-server HOST:PORT is required "
                         "(or set $FERRY_ZOOKEEPER)")
    store = _BrokerAcls(args.bootstrap_server, args.timeout, client_config(args)) if args.bootstrap_server else \
        _ZooKeeperAcls(args.zookeeper, args.timeout)
    if args.action == "add":
        return _add(args, store)
    if args.action == "list":
        return _list(args, store)
    return _remove(args, store)


# ---------------------------------------------------------------------------------------------- the actions

def _add(args: argparse.Namespace, store: _ZooKeeperAcls | _BrokerAcls) -> int:
    patterns = _patterns(args, PATTERN_TYPES[args.resource_pattern_type or "literal"])
    if not patterns:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if args.resource_pattern_type in ("any", "match"):
        raise UsageError("add takes --resource-pattern-type literal or prefixed")
    if args.producer or args.consumer:
        bindings = _convenience(args, patterns)
    else:
        entries = _entries(args, "*")
        if not entries:
            raise UsageError("name who: --allow-principal or --deny-principal (with --operation)")
        bindings = [AclBinding(p, e) for p, e in itertools.product(patterns, entries)]
    for b in bindings:
        valid = VALID_OPERATIONS[b.pattern.resource_type]
        if b.entry.operation not in valid:
            raise UsageError(f"operation {b.entry.operation.title} does not apply to a {b.pattern.resource_type.title} "
                             f"(valid: {', '.join(op.title for op in valid)})")
        why = check_binding(b)
        if why:
            raise UsageError(why)
    store.add(bindings)
    for pattern, group in itertools.groupby(bindings, key=lambda b: b.pattern):
        print(f"Added ACLs for resource `{_pattern_text(pattern)}`:")
        for b in group:
            print(f" \t{_entry_text(b.entry)}")
    return 0


def _convenience(args: argparse.Namespace, patterns: list[ResourcePattern]) -> list[AclBinding]:
    """kafka-acls' --producer (Write, Describe, Create on the topics; Write, Describe on the transactional ids;
    with --idempotent IdempotentWrite on the cluster) and --consumer (Read, Describe on the topics; Read on the
    groups), for the --allow-principal principals."""
    if args.operation or args.deny_principal:
        raise UsageError("--producer / --consumer choose the operations: no --operation or --deny-principal with them")
    if not args.allow_principal:
        raise UsageError("--producer / --consumer need --allow-principal")
    if args.cluster:
        raise UsageError("--producer / --consumer take topics, groups and transactional ids, not --cluster")
    if args.consumer and not args.group:
        raise UsageError("--consumer needs --group (the consumer's group)")
    if args.idempotent and not args.producer:
        raise UsageError("--idempotent goes with --producer")
    ops: dict[ResourceType, list[AclOperation]] = {t: [] for t in ResourceType}
    if args.producer:
        ops[ResourceType.TOPIC] += [_O.WRITE, _O.DESCRIBE, _O.CREATE]
        ops[ResourceType.TRANSACTIONAL_ID] += [_O.WRITE, _O.DESCRIBE]
    if args.consumer:
        ops[ResourceType.TOPIC] += [_O.READ, _O.DESCRIBE]
        ops[ResourceType.GROUP] += [_O.READ]
    targets = list(patterns)
    if args.idempotent:
        targets.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
        ops[ResourceType.CLUSTER] = [_O.IDEMPOTENT_WRITE]
    hosts = args.host or ["*"]
    return [AclBinding(p, AccessControlEntry(who, host, op, AclPermissionType.ALLOW))
            for p in targets for op in dict.fromkeys(ops[p.resource_type])
            for who in args.allow_principal for host in hosts]


def _list(args: argparse.Namespace, store: _ZooKeeperAcls | _BrokerAcls) -> int:
    pattern_type = PATTERN_TYPES[args.resource_pattern_type or "any"]
    patterns = _patterns(args, pattern_type)
    filters = [AclBindingFilter(p.resource_type, p.name, pattern_type, args.principal) for p in patterns] or \
        [AclBindingFilter(principal=args.principal)]
    found = sorted({b for f in filters for b in store.describe(f)})
    if args.json:
        print(json.dumps([_binding_json(b) for b in found], indent=2))
        return 0
    for pattern, group in itertools.groupby(found, key=lambda b: b.pattern):
        print(f"Current ACLs for resource `{_pattern_text(pattern)}`:")
        for b in group:
            print(f" \t{_entry_text(b.entry)}")
        print()
    return 0


def _remove(args: argparse.Namespace, store: _ZooKeeperAcls | _BrokerAcls) -> int:
    pattern_type = PATTERN_TYPES[args.resource_pattern_type or "any"]
    patterns = _patterns(args, pattern_type)
    if not patterns:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    principals = [(p, AclPermissionType.ALLOW) for p in args.allow_principal] + \
        [(p, AclPermissionType.DENY) for p in args.deny_principal] or [(None, AclPermissionType.ANY)]
    ops = [_operation(o) for o in args.operation] or [AclOperation.ANY]
    hosts = args.host or [None]
    filters = [AclBindingFilter(p.resource_type, p.name, pattern_type, who, host, op, perm)
               for p, (who, perm), op, host in itertools.product(patterns, principals, ops, hosts)]
    removed = store.remove(filters)
    for b in removed:
        print(f"Removed ACL for resource `{_pattern_text(b.pattern)}`: {_entry_text(b.entry)}")
    if not removed:
        print("no ACL matched: nothing removed", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------- where ACLs live

class _ZooKeeperAcls:
    """The ACL znodes, read and written directly."""

    def __init__(self, zookeeper: str, timeout: float) -> None:
        self._zookeeper = zookeeper
        self._timeout = timeout

    def _run(self, fn: Callable[..., T], *a: object) -> T:
        client = zk_connect(self._zookeeper, timeout=self._timeout)
        try:
            return fn(client, *a)
        finally:
            client.stop()
            client.close()

    def add(self, bindings: list[AclBinding]) -> None:
        self._run(add_acls, bindings)

    def describe(self, f: AclBindingFilter) -> list[AclBinding]:
        return AclSnapshot(self._run(read_all)).bindings(f)

    def remove(self, filters: list[AclBindingFilter]) -> list[AclBinding]:
        return sorted({b for found in self._run(remove_acls, filters) for b in found})


class _BrokerAcls:
    """A broker's CreateAcls / DescribeAcls / DeleteAcls."""

    def __init__(self, bootstrap: str, timeout: float, config: ClientConfig) -> None:
        host, sep, port = bootstrap.split(",")[0].strip().rpartition(":")
        if not sep or not port.isdigit():
            raise UsageError(f"--bootstrap-server {bootstrap!r}: expected HOST:PORT")
        self._conn = BrokerConnection(-1, host.strip("[]"), int(port), client_id="ferry-acls", timeout_s=timeout,
                                      connect_timeout_s=timeout, security=config.security())

    def _request(self, encoded: tuple) -> memoryview:
        try:
            return self._conn.request(*encoded)
        finally:
            self._conn.close()

    def add(self, bindings: list[AclBinding]) -> None:
        results = create_acls.parse_response(self._request(create_acls.encode_request(bindings)))
        errors = [f"{_pattern_text(b.pattern)} {_entry_text(b.entry)}: {error_name(code)}" + (f" ({m})" if m else "")
                  for b, (code, m) in zip(bindings, results, strict=False) if code]
        if errors:
            raise ClientError("the broker refused: " + "; ".join(errors))

    def describe(self, f: AclBindingFilter) -> list[AclBinding]:
        code, message, found = describe_acls.parse_response(self._request(describe_acls.encode_request(f)))
        if code:
            raise ClientError(f"the broker answered {error_name(code)}" + (f": {message}" if message else ""))
        return found

    def remove(self, filters: list[AclBindingFilter]) -> list[AclBinding]:
        out: set[AclBinding] = set()
        for code, message, deleted in delete_acls.parse_response(self._request(delete_acls.encode_request(filters))):
            if code:
                raise ClientError(f"the broker answered {error_name(code)}" + (f": {message}" if message else ""))
            out.update(deleted)
        return sorted(out)


# ---------------------------------------------------------------------------------------------- flags -> model

def _patterns(args: argparse.Namespace, pattern_type: PatternType) -> list[ResourcePattern]:
    stored = pattern_type if pattern_type in (PatternType.LITERAL, PatternType.PREFIXED) else PatternType.LITERAL
    out = [ResourcePattern(ResourceType.TOPIC, t, stored) for t in args.topic]
    out += [ResourcePattern(ResourceType.GROUP, g, stored) for g in args.group]
    out += [ResourcePattern(ResourceType.TRANSACTIONAL_ID, x, stored) for x in args.transactional_id]
    if args.cluster:
        out.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    for p in out:
        if not p.name:
            raise UsageError(f"an empty {p.resource_type.title} name")
    return out


def _operation(text: str) -> AclOperation:
    try:
        return operation_named(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _entries(args: argparse.Namespace, default_host: str) -> list[AccessControlEntry]:
    if (args.allow_principal or args.deny_principal) and not args.operation:
        raise UsageError("--operation is required with --allow-principal / --deny-principal")
    ops = [_operation(o) for o in args.operation]
    hosts = args.host or [default_host]
    who = [(p, AclPermissionType.ALLOW) for p in args.allow_principal] + \
        [(p, AclPermissionType.DENY) for p in args.deny_principal]
    return [AccessControlEntry(p, h, op, perm) for (p, perm), op, h in itertools.product(who, ops, hosts)]


def _pattern_text(p: ResourcePattern) -> str:
    return f"ResourcePattern(resourceType={p.resource_type.name}, name={p.name}, patternType={p.pattern_type.name})"


def _entry_text(e: AccessControlEntry) -> str:
    return (f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
            f"permissionType={e.permission.name})")


def _binding_json(b: AclBinding) -> dict[str, str]:
    return {"resourceType": b.pattern.resource_type.title, "name": b.pattern.name,
            "patternType": b.pattern.pattern_type.name, "principal": b.entry.principal, "host": b.entry.host,
            "operation": b.entry.operation.title, "permissionType": b.entry.permission.title}
