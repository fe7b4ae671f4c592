"""`ferry acls add|list|remove` (kafka-acls' spelling) against a real ZooKeeper (--zookeeper) and a real broker's
ACL APIs (--bootstrap-server); bad input is one line on stderr with exit 2, an unreachable ZooKeeper exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from ferry.embedded import BrokerProcess
from ferry.wire.acl_binding import AccessControlEntry, ResourcePattern
from ferry.wire.protocol.acl_types import AclOperation, AclPermissionType, PatternType, ResourceType
from ferry.zk import connect
from ferry.zk.acl_store import read_all

pytestmark = pytest.mark.timeout(120)


def ferry(*argv: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "ferry.cli", "acls", *argv], capture_output=True, text=True,
                          timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def stored(zk: str) -> dict:
    c = connect(zk)
    try:
        return read_all(c)
    finally:
        c.stop()
        c.close()


@pytest.mark.slow
def test_add_list_remove_in_zookeeper(zk_connect):
    rc, out, err = ferry("add", "--allow-principal", "User:mirror", "--operation", "Read", "--operation", "Describe",
                         "--topic", "*", "--group", "mirror", "--zookeeper", zk_connect)
    assert rc == 0, err
    assert "Added ACLs for resource `ResourcePattern(resourceType=TOPIC, name=*, patternType=LITERAL)`:" in out
    rc, _out, err = ferry("add", "--deny-principal", "User:bob", "--operation", "write", "--topic", "logs.",
                          "--resource-pattern-type", "prefixed", "--host", "10.0.0.7", "--zookeeper", zk_connect)
    assert rc == 0, err
    acls = stored(zk_connect)
    assert acls[ResourcePattern(ResourceType.TOPIC, "logs.", PatternType.PREFIXED)] == {
        AccessControlEntry("User:bob", "10.0.0.7", AclOperation.WRITE, AclPermissionType.DENY)}
    assert len(acls[ResourcePattern(ResourceType.GROUP, "mirror")]) == 2

    rc, out, err = ferry("list", "--zookeeper", zk_connect)
    assert rc == 0, err
    assert ("Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=logs., patternType=PREFIXED)`:\n"
            " \t(principal=User:bob, host=10.0.0.7, operation=WRITE, permissionType=DENY)\n") in out
    rc, out, err = ferry("list", "--topic", "logs.app", "--resource-pattern-type", "match", "--json",
                         "--zookeeper", zk_connect)
    assert rc == 0, err
    assert sorted((a["name"], a["operation"]) for a in json.loads(out)) == [("*", "Describe"), ("*", "Read"),
                                                                          ("logs.", "Write")]
    rc, out, err = ferry("list", "--principal", "User:bob", "--json", "--zookeeper", zk_connect)
    assert [a["principal"] for a in json.loads(out)] == ["User:bob"]

    rc, out, err = ferry("remove", "--allow-principal", "User:mirror", "--operation", "Describe", "--topic", "*",
                         "--group", "mirror", "--zookeeper", zk_connect)
    assert rc == 0, err
    assert out.count("Removed ACL") == 2
    rc, out, err = ferry("remove", "--topic", "logs.", "--zookeeper", zk_connect)  # every ACL of the resource
    assert rc == 0 and "Removed ACL" in out, err
    assert {p.name for p in stored(zk_connect)} == {"*", "mirror"}


@pytest.mark.parametrize(("argv", "message"), [
    (("add", "--allow-principal", "User:a", "--operation", "Rread", "--topic", "t"), "unknown operation 'Rread'"),
    (("add", "--allow-principal", "User:a", "--operation", "Read"), "name a resource"),
    (("add", "--allow-principal", "alice", "--operation", "Read", "--topic", "t"), "is not TYPE:NAME"),
    (("add", "--topic", "t"), "name who"),
    (("add", "--allow-principal", "User:a", "--topic", "t"), "--operation is required"),
    (("remove", "--operation", "Read"), "name a resource"),
    (("add", "--allow-principal", "User:a", "--operation", "Write", "--cluster"), "does not apply to a Cluster"),
])
def test_bad_input_is_one_line_and_exit_2(zk_connect, argv, message):
    rc, out, err = ferry(*argv, "--zookeeper", zk_connect)
    assert rc == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert "Traceback" not in err


def test_unreachable_zookeeper_is_exit_1():
    rc, _out, err = ferry("list", "--zookeeper", "127.0.0.1:1/nowhere", "--timeout", "1")
    assert rc == 1 and err.strip() == "ferry acls list: error: cannot connect to ZooKeeper at 127.0.0.1:1 within 1 s"


@pytest.mark.slow
def test_through_a_brokers_acl_apis(zk_server, tmp_path):
    zk = f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}"
    secured = BrokerProcess(1, tmp_path / "s" / "data", zk, "live", extra_args=(
        "--override", "authorizer.class.name=ferry", "--override", "super.users=User:ANONYMOUS"))
    plain = BrokerProcess(2, tmp_path / "p" / "data", f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}", "live")
    secured.start()
    plain.start()
    try:
        rc, out, err = ferry("add", "--allow-principal", "User:app", "--operation", "Write", "--topic", "clicks",
                             "--bootstrap-server", secured.bootstrap)
        assert rc == 0, err
        rc, out, err = ferry("add", "--allow-principal", "User:app", "--operation", "IdempotentWrite", "--cluster",
                             "--bootstrap-server", secured.bootstrap)
        assert rc == 0, err
        assert len(stored(zk)) == 2
        rc, out, err = ferry("list", "--json", "--bootstrap-server", secured.bootstrap)
        assert rc == 0, err
        assert sorted((a["resourceType"], a["operation"]) for a in json.loads(out)) == [
            ("Cluster", "IdempotentWrite"), ("Topic", "Write")]
        rc, out, err = ferry("remove", "--topic", "clicks", "--cluster", "--bootstrap-server", secured.bootstrap)
        assert rc == 0 and out.count("Removed ACL") == 2, err
        assert stored(zk) == {}
        # a broker without an authorizer says so (SECURITY_DISABLED): a refusal of what was asked, exit 2, one line
        rc, out, err = ferry("list", "--bootstrap-server", plain.bootstrap)
        assert rc == 2 and "SECURITY_DISABLED" in err and err.count("\n") == 1, err
    finally:
        secured.stop()
        plain.stop()


def test_producer_and_consumer_conveniences(zk_connect):
    rc, out, err = ferry("add", "--producer", "--idempotent", "--consumer", "--allow-principal", "User:app",
                         "--topic", "clicks", "--group", "loaders", "--transactional-id", "app-tx",
                         "--zookeeper", zk_connect)
    assert rc == 0, err
    got = {(p.resource_type.title, p.name, e.operation.title) for p, entries in stored(zk_connect).items()
           for e in entries if e.principal == "User:app" and e.permission == AclPermissionType.ALLOW}
    assert got == {("Topic", "clicks", op) for op in ("Write", "Describe", "Create", "Read")} | {
        ("Group", "loaders", "Read"), ("TransactionalId", "app-tx", "Write"), ("TransactionalId", "app-tx", "Describe"),
        ("Cluster", "kafka-cluster", "IdempotentWrite")}
    assert "Added ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster" in out
    rc, _out, err = ferry("add", "--consumer", "--allow-principal", "User:app", "--topic", "t",
                          "--zookeeper", zk_connect)
    assert rc == 2 and "--consumer needs --group" in err
