"""The ACL store against a real ZooKeeper: Kafka's znode layout and JSON, change notifications, conditional
writes that do not lose a concurrent change, filters that delete exactly what they match, and a broker's cache
(AclCache) following a change within a second."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ferry.wire.acl_binding import AccessControlEntry, AclBinding, AclBindingFilter, ResourcePattern
from ferry.wire.protocol.acl_types import AclOperation, AclPermissionType, PatternType, ResourceType
from ferry.zk import connect
from ferry.zk.acl_store import (
    EXTENDED_CHANGES,
    LITERAL_CHANGES,
    AclCache,
    AclStoreError,
    add_acls,
    purge_old_changes,
    read_all,
    remove_acls,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def b(rtype: ResourceType, name: str, principal: str, op: AclOperation, perm: AclPermissionType = ALLOW,
      pattern: PatternType = PatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, perm))


@pytest.fixture
def client(zk_connect):
    c = connect(zk_connect)
    yield c
    c.stop()
    c.close()


def test_kafkas_layout_json_and_change_notifications(client):
    add_acls(client, [b(ResourceType.TOPIC, "events", "User:alice", AclOperation.READ),
                      b(ResourceType.TOPIC, "events", "User:bob", AclOperation.WRITE, DENY, host="10.0.0.7"),
                      b(ResourceType.GROUP, "team-", "User:alice", AclOperation.READ, pattern=PatternType.PREFIXED),
                      b(ResourceType.TRANSACTIONAL_ID, "tx", "User:alice", AclOperation.WRITE),
                      b(ResourceType.CLUSTER, "kafka-cluster", "User:ops", AclOperation.ALTER)])
    data, _ = client.get("/kafka-acl/Topic/events")
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.7"}]}
    assert json.loads(client.get("/kafka-acl-extended/prefixed/Group/team-")[0])["acls"][0]["operation"] == "Read"
    assert client.exists("/kafka-acl/TransactionalId/tx") and client.exists("/kafka-acl/Cluster/kafka-cluster")
    literal = sorted(client.get_children(LITERAL_CHANGES))
    assert all(c.startswith("acl_changes_") for c in literal) and len(literal) == 3
    assert {client.get(f"{LITERAL_CHANGES}/{c}")[0] for c in literal} == {
        b"Topic:events", b"TransactionalId:tx", b"Cluster:kafka-cluster"}
    (ext,) = client.get_children(EXTENDED_CHANGES)
    assert json.loads(client.get(f"{EXTENDED_CHANGES}/{ext}")[0]) == {
        "version": 1, "resourceType": "Group", "name": "team-", "patternType": "PREFIXED"}
    assert sum(map(len, read_all(client).values())) == 5


def test_remove_deletes_exactly_what_the_filter_matches(client):
    keep = b(ResourceType.TOPIC, "logs", "User:alice", AclOperation.READ)
    drop = b(ResourceType.TOPIC, "logs", "User:bob", AclOperation.READ)
    other = b(ResourceType.TOPIC, "logs.", "User:bob", AclOperation.READ, pattern=PatternType.PREFIXED)
    add_acls(client, [keep, drop, other])
    (removed,) = remove_acls(client, [AclBindingFilter(ResourceType.TOPIC, "logs", PatternType.LITERAL, "User:bob")])
    assert removed == [drop]
    assert read_all(client) == {keep.pattern: frozenset({keep.entry}), other.pattern: frozenset({other.entry})}
    # MATCH: every pattern that applies to the name "logs.x" (the prefixed one), not the literal "logs"
    (removed,) = remove_acls(client, [AclBindingFilter(ResourceType.TOPIC, "logs.x", PatternType.MATCH)])
    assert removed == [other]
    remove_acls(client, [AclBindingFilter()])
    assert read_all(client) == {} and not client.exists("/kafka-acl/Topic/logs")  # empty znodes go


def test_concurrent_writers_do_not_lose_each_other(zk_connect):
    def writer(i: int) -> None:
        c = connect(zk_connect)
        try:
            for j in range(10):
                add_acls(c, [b(ResourceType.TOPIC, "busy", f"User:u{i}-{j}", AclOperation.READ)])
        finally:
            c.stop()
            c.close()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    c = connect(zk_connect)
    try:
        assert len(read_all(c)[ResourcePattern(ResourceType.TOPIC, "busy")]) == 40
    finally:
        c.stop()
        c.close()


def test_unstorable_bindings_are_refused(client):
    for bad in (b(ResourceType.CLUSTER, "other", "User:a", AclOperation.ALTER),
                b(ResourceType.TOPIC, "t", "alice", AclOperation.READ),
                b(ResourceType.TOPIC, "a/b", "User:a", AclOperation.READ),
                b(ResourceType.TOPIC, "t", "User:a", AclOperation.ANY)):
        with pytest.raises(AclStoreError):
            add_acls(client, [bad])
    assert read_all(client) == {}


def test_cache_follows_changes_within_a_second(client):
    cache = AclCache(lambda: client)
    cache.start()
    try:
        assert cache.snapshot.acls == {}
        acl = b(ResourceType.TOPIC, "t", "User:alice", AclOperation.WRITE)
        add_acls(client, [acl])
        t0 = time.monotonic()
        while not cache.snapshot.matching(ResourceType.TOPIC, "t") and time.monotonic() - t0 < 5:
            time.sleep(0.01)
        assert cache.snapshot.matching(ResourceType.TOPIC, "t") == [acl.entry]
        assert time.monotonic() - t0 < 1.0
        generation = cache.generation
        remove_acls(client, [AclBindingFilter(ResourceType.TOPIC, "t")])
        t0 = time.monotonic()
        while cache.snapshot.matching(ResourceType.TOPIC, "t") and time.monotonic() - t0 < 5:
            time.sleep(0.01)
        assert cache.snapshot.matching(ResourceType.TOPIC, "t") == [] and cache.generation > generation
    finally:
        cache.stop()


def test_old_change_notifications_are_purged(client):
    add_acls(client, [b(ResourceType.TOPIC, "t", "User:a", AclOperation.READ)])
    assert purge_old_changes(client) == 0  # fresh ones stay
    assert purge_old_changes(client, now_s=time.time() + 16 * 60) == 1
    assert client.get_children(LITERAL_CHANGES) == []
