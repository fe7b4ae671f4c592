"""`ferry produce` / `ferry consume` against secured listeners through --command-config and $FERRY_CLIENT_CONFIG
(docs/security.md "Clients and tools"): SASL_SSL with SCRAM-SHA-512, SSL with a client certificate; a wrong
password is one line and exit 1, and the password shows up in no output and no process list."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from secure_cluster import add_user, start_secure_cluster  # noqa: E402

from ferry.zk import ClusterRegistry  # noqa: E402

PASSWORD = "Cli-s3cret-Pass"


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    cluster = start_secure_cluster(zk_server.connect, tmp_path_factory.mktemp("clisec"))
    add_user(cluster.zk, "alice", PASSWORD)
    with ClusterRegistry(cluster.zk) as reg:
        for name, partitions in (("_audit", 1), ("cli-sasl", 2), ("cli-mtls", 1), ("cli-env", 1)):
            reg.create_topic(name, partitions, None, 1)
    yield cluster
    cluster.stop()


def ferry(*args: str, stdin: str | None = None, env: dict[str, str] | None = None, cwd: Path | None = None
          ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferry.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})}, cwd=cwd)


def _roundtrip(secured, topic: str, flags: list[str], env: dict[str, str] | None = None, group: bool = False
               ) -> list[str]:
    lines = [f"{topic}-{i}" for i in range(25)]
    r = ferry("produce", "--zookeeper", secured.zk, "--topic", topic, *flags, stdin="\n".join(lines) + "\n",
              env=env)
    assert r.returncode == 0, r.stderr
    assert "25 of 25 message(s) acknowledged" in r.stderr
    read = ["--group", f"g-{topic}"] if group else []
    r = ferry("consume", "--zookeeper", secured.zk, "--topic", topic, "--from-beginning", "--max-messages", "25",
              "--timeout", "20", *read, *flags, env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(lines)
    return lines


def test_round_trip_over_sasl_ssl_scram_512_with_command_config(secured):
    config = secured.sasl_ssl_config("alice", PASSWORD)
    _roundtrip(secured, "cli-sasl", ["--command-config", str(config)], group=True)
    # Kafka's console tools' spellings work too
    r = ferry("consume", "--bootstrap-server", secured.bootstrap("SASL_SSL"), "--topic", "cli-sasl",
              "--from-beginning", "--max-messages", "25", "--timeout", "20", "--consumer.config", str(config))
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.split()) == 25


def test_round_trip_over_ssl_with_a_client_certificate(secured):
    _roundtrip(secured, "cli-mtls", ["--command-config",
                                     str(secured.mtls_config("erin"))])


def test_round_trip_with_the_environment_variable(secured):
    env = {"FERRY_CLIENT_CONFIG": str(secured.sasl_ssl_config("alice", PASSWORD))}
    _roundtrip(secured, "cli-env", [], env=env)


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_wrong_password_one_line_exit_1_password_never_shown(secured, tmp_path, command):
    wrong = "Wr0ng-Password-xyz"
    config = secured.sasl_ssl_config("alice", wrong)
    r = ferry(command, "--zookeeper", secured.zk, "--topic", "cli-sasl", "--command-config", str(config),
              "--timeout", "10", stdin="x\n", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ferry {command}: error: ") and "Traceback" not in r.stderr
    assert "SASL authentication as alice failed" in lines[0]
    assert wrong not in r.stderr + r.stdout and list(tmp_path.iterdir()) == []


def test_missing_config_file_is_a_usage_error(secured, tmp_path):
    r = ferry("produce", "--zookeeper", secured.zk, "--topic", "cli-sasl", "--command-config",
              str(tmp_path / "nope.properties"), stdin="x\n")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "nope.properties" in r.stderr and "Traceback" not in r.stderr


def test_the_password_is_not_in_the_process_list(secured):
    """A running console producer (waiting on stdin) shows its config file's name, never what is in it."""
    config = secured.sasl_ssl_config("alice", PASSWORD)
    proc = subprocess.Popen([sys.executable, "-m", "ferry.cli", "produce", "--zookeeper", secured.zk, "--topic",
                             "cli-sasl", "--command-config", str(config)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        listing = ""
        while time.monotonic() < deadline and str(config) not in listing:
            listing = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, timeout=10).stdout
            time.sleep(0.2)
        assert str(config) in listing and PASSWORD not in listing
        out, err = proc.communicate("one\ntwo\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err
    assert PASSWORD not in err + out
