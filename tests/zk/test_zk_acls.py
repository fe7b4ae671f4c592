"""ZooKeeper ACLs: with $FERRY_ZOOKEEPER_CREDENTIALS a client without the credentials can read the registry but
not rewrite it, cannot read secrets at all, and a real broker and the console still work; an existing open tree
is secured (and opened again) by the migration."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from ferry.wire.scram import ScramCredential
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.kazoo_client import connect
from ferry.zk.scram_credentials import ScramCredentialStore
from ferry.zk.zk_acl_migration import secure_tree, unsecure_tree
from ferry.zk.zk_credentials import ENV_CREDENTIALS, ZkCredentials, ZkCredentialsError


def _credentials_file(tmp_path: Path, user: str = "ferry", password: str = "s3cret-zk") -> Path:
    path = tmp_path / "zk-credentials"
    path.write_text(f"# the cluster's ZooKeeper identity\nusername={user}\npassword={password}\n")
    path.chmod(0o600)
    return path


def _anonymous(zk_connect: str) -> KazooClient:
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=10)
    return client


@pytest.fixture
def secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ZkCredentials]:
    path = _credentials_file(tmp_path)
    monkeypatch.setenv(ENV_CREDENTIALS, str(path))
    yield ZkCredentials.from_file(str(path))


def test_credentials_file_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ZkCredentialsError, match="cannot read the ZooKeeper credentials file .*missing"):
        ZkCredentials.from_file(str(tmp_path / "missing"))
    bad = tmp_path / "bad"
    bad.write_text("username=ferry\n")
    with pytest.raises(ZkCredentialsError, match="needs a username= and a password= line"):
        ZkCredentials.from_file(str(bad))
    bad.write_text("just words\n")
    with pytest.raises(ZkCredentialsError, match="line 1: expected key=value"):
        ZkCredentials.from_file(str(bad))
    good = ZkCredentials.from_file(str(_credentials_file(tmp_path, password="do-not-print")))
    assert "do-not-print" not in repr(good)


def test_secured_registry_is_read_only_to_others(secured: ZkCredentials, zk_connect: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with ClusterRegistry(zk_connect).start() as registry:
        registry.register_broker(1, "127.0.0.1", 9092, "live")
        registry.create_topic_with_assignment("events", {0: [1], 1: [1]})
        ScramCredentialStore(registry.client).set(  # as `ferry users add` stores it
            "alice", "SCRAM-SHA-512", ScramCredential.create("SCRAM-SHA-512", "alice-secret"))
    other = _anonymous(zk_connect)
    try:
        data, _ = other.get("/brokers/topics/events")  # the registry stays readable: tools and dashboards read it
        assert b"partitions" in data
        with pytest.raises(NoAuthError):
            other.set("/brokers/topics/events", b"{}")
        with pytest.raises(NoAuthError):
            other.delete("/brokers/topics/events", recursive=True)
        with pytest.raises(NoAuthError):
            other.create("/brokers/topics/intruder", b"{}")
        with pytest.raises(NoAuthError):
            other.get("/config/users/alice")  # secrets: not even readable
        with pytest.raises(NoAuthError):
            other.get_children("/config/users")  # nor who the users are
    finally:
        other.stop()
        other.close()
    wrong = KazooClient(hosts=zk_connect, timeout=10, auth_data=[("digest", "ferry:wrong-password")])
    wrong.start(timeout=10)
    try:
        with pytest.raises(NoAuthError):
            wrong.set("/brokers/topics/events", b"{}")
    finally:
        wrong.stop()
        wrong.close()
    # The chroot's parent stays open: another cluster without these credentials makes its chroot beside it.
    monkeypatch.delenv(ENV_CREDENTIALS)
    with ClusterRegistry(zk_connect + "-sibling").start() as sibling:
        sibling.register_broker(1, "127.0.0.1", 9092, "offline")


def test_broker_and_console_work_with_credentials(secured: ZkCredentials, cluster_factory, zk_connect: str) -> None:
    cluster = cluster_factory(n_brokers=1)  # started with $FERRY_ZOOKEEPER_CREDENTIALS in its environment
    run = subprocess.run([sys.executable, "-m", "ferry.cli", "topics", "create", "--zookeeper", cluster.zk_connect,
                          "clicks", "--partitions", "1", "--replication-factor", "1"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        producer.produce("clicks", f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["clicks"])
    got = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == 10:
                break
    finally:
        consumer.close()
    assert got == [f"m{i}".encode() for i in range(10)]
    other = _anonymous(cluster.zk_connect)
    try:
        assert other.exists("/brokers/ids/1") is not None
        with pytest.raises(NoAuthError):
            other.delete("/brokers/ids/1")  # nobody else can unregister (or impersonate) the broker
        with pytest.raises(NoAuthError):
            other.set("/brokers/topics/clicks", b"{}")
    finally:
        other.stop()
        other.close()


def test_migration_secures_and_reopens_an_existing_tree(tmp_path: Path, zk_connect: str) -> None:
    with ClusterRegistry(zk_connect).start() as registry:  # made before credentials existed
        registry.register_broker(1, "127.0.0.1", 9092, "live")
        registry.create_topic_with_assignment("old", {0: [1]})
    credentials = ZkCredentials.from_file(str(_credentials_file(tmp_path)))
    owner = connect(zk_connect, credentials=credentials)
    other = _anonymous(zk_connect)
    try:
        other.set("/brokers/topics/old", other.get("/brokers/topics/old")[0])  # open: anyone may write
        assert secure_tree(owner, credentials) >= 3
        with pytest.raises(NoAuthError):
            other.set("/brokers/topics/old", b"{}")
        owner.set("/brokers/topics/old", owner.get("/brokers/topics/old")[0])  # the owner still may
        assert unsecure_tree(owner) >= 3
        other.set("/brokers/topics/old", other.get("/brokers/topics/old")[0])
        # the same through the command, with the identity of $FERRY_ZOOKEEPER_CREDENTIALS
        env = {**os.environ, ENV_CREDENTIALS: str(tmp_path / "zk-credentials")}
        for action, writable in (("secure", False), ("unsecure", True)):
            run = subprocess.run([sys.executable, "-m", "ferry.cli", "zookeeper-acls", action, "--zookeeper",
                                  zk_connect], capture_output=True, text=True, timeout=60, env=env)
            assert run.returncode == 0 and "znodes" in run.stdout, run.stderr
            try:
                other.set("/brokers/topics/old", other.get("/brokers/topics/old")[0])
                assert writable, "secured, yet writable by a client without the credentials"
            except NoAuthError:
                assert not writable
    finally:
        for c in (owner, other):
            c.stop()
            c.close()
