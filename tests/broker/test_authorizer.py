"""The authorizer's decisions (Kafka's AclAuthorizer rules) over a snapshot of ACLs: implications, Deny wins,
literal / wildcard / prefixed patterns, wildcard principals, hosts, super users, allow.everyone.if.no.acl.found,
the by-resource-type check of idempotent producers, memoised decisions dropped when the ACLs change, and the
rate-limited denial log."""

from __future__ import annotations

import logging

import pytest

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.request_context import KafkaPrincipal, RequestContext, Session
from ferry.wire.acl_binding import AccessControlEntry, ResourcePattern
from ferry.wire.protocol.acl_types import AclOperation as Op
from ferry.wire.protocol.acl_types import AclPermissionType, PatternType, ResourceType
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import RequestHeader
from ferry.zk.acl_store import AclCache, AclSnapshot

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def request(principal: str = "User:alice", host: str = "10.0.0.1") -> RequestContext:
    return RequestContext(RequestHeader(ApiKey.PRODUCE, 8, 1, "test"),
                          Session(KafkaPrincipal.parse(principal), host))


def authorizer(acls: dict, **kw) -> Authorizer:
    cache = AclCache(lambda: None)  # never started: its snapshot is set by hand
    cache.snapshot = AclSnapshot({p: frozenset(e) for p, e in acls.items()})
    cache.generation = 1
    return Authorizer(cache, **kw)


def lit(rtype: ResourceType, name: str) -> ResourcePattern:
    return ResourcePattern(rtype, name, PatternType.LITERAL)


def entry(op: Op, perm: AclPermissionType = ALLOW, principal: str = "User:alice", host: str = "*"
          ) -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, perm)


def test_without_an_authorizer_everything_is_allowed():
    a = Authorizer()
    assert not a.enabled and a.authorize(request(), Op.DELETE, TOPIC, "t")
    assert a.allowed_names(request(), Op.DESCRIBE, TOPIC, ["a", "b"]) == ["a", "b"]


@pytest.mark.parametrize(("granted", "asked", "allowed"), [
    (Op.READ, Op.READ, True), (Op.READ, Op.DESCRIBE, True), (Op.WRITE, Op.DESCRIBE, True),
    (Op.DELETE, Op.DESCRIBE, True), (Op.ALTER, Op.DESCRIBE, True), (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
    (Op.ALL, Op.WRITE, True), (Op.READ, Op.WRITE, False), (Op.DESCRIBE, Op.READ, False),
    (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, False), (Op.CREATE, Op.DESCRIBE, False),
])
def test_implications(granted, asked, allowed):
    a = authorizer({lit(TOPIC, "t"): [entry(granted)]})
    assert a.authorize(request(), asked, TOPIC, "t") is allowed


def test_deny_wins_and_only_for_its_operation():
    a = authorizer({lit(TOPIC, "t"): [entry(Op.ALL), entry(Op.WRITE, DENY)]})
    assert not a.authorize(request(), Op.WRITE, TOPIC, "t")
    assert a.authorize(request(), Op.READ, TOPIC, "t")
    # a Deny of All denies everything; a Deny on another resource pattern that applies (wildcard) too
    a = authorizer({lit(TOPIC, "t"): [entry(Op.READ)], lit(TOPIC, "*"): [entry(Op.ALL, DENY)]})
    assert not a.authorize(request(), Op.READ, TOPIC, "t")


def test_patterns_principals_and_hosts():
    a = authorizer({
        ResourcePattern(TOPIC, "app.", PatternType.PREFIXED): [entry(Op.WRITE)],
        lit(TOPIC, "*"): [entry(Op.READ, principal="User:*")],
        lit(GROUP, "g"): [entry(Op.READ, host="10.0.0.9")],
    })
    assert a.authorize(request(), Op.WRITE, TOPIC, "app.x")
    assert not a.authorize(request(), Op.WRITE, TOPIC, "apple")
    assert a.authorize(request("User:zoe"), Op.READ, TOPIC, "anything")
    assert not a.authorize(request("User:zoe"), Op.WRITE, TOPIC, "app.x")  # the prefixed ACL names alice only
    assert not a.authorize(request(), Op.READ, GROUP, "g")  # wrong host
    assert a.authorize(request(host="10.0.0.9"), Op.READ, GROUP, "g")


def test_no_acl_found_super_users():
    a = authorizer({}, super_users=["User:admin"])
    assert not a.authorize(request(), Op.READ, TOPIC, "t")  # allow.everyone.if.no.acl.found defaults to false
    assert a.authorize(request("User:admin"), Op.DELETE, TOPIC, "t")
    a = authorizer({lit(TOPIC, "t"): [entry(Op.READ, principal="User:bob")]}, allow_if_no_acl=True)
    assert a.authorize(request(), Op.READ, TOPIC, "untouched")  # no ACL on it: everyone
    assert not a.authorize(request(), Op.READ, TOPIC, "t")  # an ACL exists, and not for alice


def test_write_on_some_topic_lets_a_producer_be_idempotent():
    a = authorizer({ResourcePattern(TOPIC, "app.", PatternType.PREFIXED): [entry(Op.WRITE)]})
    assert a.allowed_on_some(request(), Op.WRITE, TOPIC)
    assert not a.allowed_on_some(request("User:bob"), Op.WRITE, TOPIC)
    a = authorizer({ResourcePattern(TOPIC, "app.", PatternType.PREFIXED): [entry(Op.WRITE)],
                    lit(TOPIC, "*"): [entry(Op.WRITE, DENY)]})
    assert not a.allowed_on_some(request(), Op.WRITE, TOPIC)  # the wildcard Deny covers every allowed topic


def test_decisions_follow_a_change_of_the_acls():
    a = authorizer({lit(TOPIC, "t"): [entry(Op.WRITE)]})
    cache = a._acls
    assert a.authorize(request(), Op.WRITE, TOPIC, "t")
    cache.snapshot = AclSnapshot({})
    cache.generation += 1
    assert not a.authorize(request(), Op.WRITE, TOPIC, "t")


def test_denials_are_logged_rate_limited(caplog):
    a = authorizer({})
    with caplog.at_level(logging.WARNING, logger="ferry.broker.server.authorizer"):
        for _ in range(100):
            a.authorize(request(), Op.WRITE, TOPIC, "t")
        assert not a.authorize(request(), Op.DESCRIBE, TOPIC, "hidden", log_denial=False)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == ("Principal = User:alice is Denied Operation = Write from host = 10.0.0.1 on resource = "
                        "Topic:t for request = PRODUCE")
    assert len(lines) == 20 and not any("hidden" in line for line in lines)
