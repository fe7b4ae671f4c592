"""`ferry users`: SCRAM credentials in ZooKeeper in Kafka's layout, the password from a prompt (a real
pseudo-terminal), a file or stdin and never stored; bad input exits 2 with one line, nothing written."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest
from kazoo.client import KazooClient

from ferry.wire.scram import ScramCredential


def _run(zk: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferry.cli", "users", *args, "--zookeeper", zk], input=stdin,
                          capture_output=True, text=True, timeout=60)


def _znode(zk: str, name: str) -> dict:
    hosts, _, chroot = zk.partition("/")
    client = KazooClient(hosts=hosts)
    client.start(10)
    try:
        return json.loads(client.get(f"/{chroot}/config/users/{name}")[0])
    finally:
        client.stop()
        client.close()


def _expect(fd: int, text: bytes, timeout: float = 20.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while text not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"no {text!r} in {seen!r}")
        seen += os.read(fd, 1024)
    return seen


@pytest.mark.slow
def test_add_from_a_prompt_list_and_remove(zk_connect, tmp_path):
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ferry.cli", "users", "add", "alice", "--mechanism",
                             "SCRAM-SHA-256", "--mechanism", "SCRAM-SHA-512", "--zookeeper", zk_connect],
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    try:
        _expect(master, b"password for alice:")
        os.write(master, b"pencil\n")
        _expect(master, b"again:")
        os.write(master, b"pencil\n")
        out = _expect(master, b"credential stored")
        assert proc.wait(30) == 0
    finally:
        os.close(master)
    assert b"pencil" not in out  # not echoed
    doc = _znode(zk_connect, "alice")
    assert doc["version"] == 1 and set(doc["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    for mechanism, text in doc["config"].items():
        assert "pencil" not in text and text.endswith("iterations=4096")
        assert ScramCredential.decode(text).matches(mechanism, "pencil")

    pw = tmp_path / "bob.pw"
    pw.write_text("from-a-file\nsecond line ignored\n")
    assert _run(zk_connect, "add", "bob", "--password-file", str(pw)).returncode == 0
    assert ScramCredential.decode(_znode(zk_connect, "bob")["config"]["SCRAM-SHA-512"]).matches(
        "SCRAM-SHA-512", "from-a-file")
    r = _run(zk_connect, "list")
    assert r.returncode == 0 and r.stdout.splitlines() == ["alice\tSCRAM-SHA-256,SCRAM-SHA-512", "bob\tSCRAM-SHA-512"]
    assert _run(zk_connect, "remove", "alice", "--mechanism", "SCRAM-SHA-256").returncode == 0
    assert list(_znode(zk_connect, "alice")["config"]) == ["SCRAM-SHA-512"]
    assert _run(zk_connect, "remove", "alice").returncode == 0
    r = _run(zk_connect, "list", "--json")
    assert json.loads(r.stdout) == {"bob": ["SCRAM-SHA-512"]}


@pytest.mark.slow
def test_bad_input_exits_2_and_writes_nothing(zk_connect, tmp_path):
    for args, stdin, message in (
        (("add", "x y", "--password-stdin"), "pw\n", "user name"),
        (("add", "carol", "--password-stdin"), "\n", "empty password"),
        (("add", "carol"), "", "--password-file"),  # no terminal, no source
        (("add", "carol", "--password-stdin", "--iterations", "10"), "pw\n", "--iterations"),
    ):
        r = _run(zk_connect, *args, stdin=stdin)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    r = _run(zk_connect, "add", "carol", "--password-file", str(tmp_path / "missing"))  # a file: exit 1
    assert r.returncode == 1 and "missing" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = _run(zk_connect, "list")  # nothing was written, not even the chroot
    assert r.returncode == 2 and "nothing was ever registered" in r.stderr and r.stdout == ""
    r = subprocess.run([sys.executable, "-m", "ferry.cli", "users", "add", "carol", "--password", "pw"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unrecognized arguments" in r.stderr  # no password argument exists
