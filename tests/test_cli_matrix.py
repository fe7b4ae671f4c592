"""The CLI error matrix: every `ferry` command under an unreachable ZooKeeper, unreachable brokers, a bad
argument, a missing or unreadable file, a path it may not write and a full disk. Each case runs `ferry` as a
process in an empty working directory and must print exactly ONE line on stderr (no traceback), exit 2 for a
usage error and 1 for a runtime one (docs/cli.md, ferry/cli_runner.py), and leave the directory empty.

The cases run in parallel (a thread each, bounded timeouts): the matrix takes about as long as its slowest case.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.cli import COMMANDS
from ferry.embedded import free_port

FERRY = str(Path(sys.executable).with_name("ferry"))
NO_ZK = "127.0.0.1:1/ferry/x"  # nothing listens on port 1
NO_BROKER = "127.0.0.1:1"
USAGE, RUNTIME = 2, 1
CASE_TIMEOUT_S = 120


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    rc: int
    stdin: str = ""
    env: tuple[tuple[str, str], ...] = ()  # more environment variables


@dataclass
class Paths:
    """Files and directories the cases point at (all outside the cases' working directories)."""

    root: Path
    full: Path  # a full tmpfs (None-like when mounting is impossible: the full-disk cases then fail loudly)

    @property
    def missing(self) -> str:
        return str(self.root / "no-such-file.json")

    @property
    def a_dir(self) -> str:  # exists, but is no file: unreadable as one
        return str(self.root)

    @property
    def bad_client_config(self) -> str:  # a --command-config file with a value no client takes
        return str(self.root / "bad-client.properties")

    @property
    def plan(self) -> str:
        return str(self.root / "plan.json")

    @property
    def schema(self) -> str:
        return str(self.root / "s.avsc")

    unwritable = "/etc/passwd/x"  # a path under a file: no one, root included, can create it


def unreachable_zookeeper(p: Paths) -> list[Case]:
    z = ("--zookeeper", NO_ZK, "--timeout", "1")
    cases = [
        ("topics create", ("topics", "create", "t", "--partitions", "1", *z)),
        ("topics list", ("topics", "list", *z)),
        ("topics describe", ("topics", "describe", *z)),
        ("topics alter", ("topics", "alter", "t", "--partitions", "2", *z)),
        ("topics delete", ("topics", "delete", "t", *z)),
        ("configs describe", ("configs", "--topic", "t", "--describe", *z)),
        ("configs quotas", ("configs", "--entity-type", "clients", "--entity-name", "c", "--alter", "--add-config",
                            "producer_byte_rate=1024", *z)),
        ("topics elect-leaders", ("topics", "elect-leaders", "--all-topic-partitions", *z)),
        ("topics reassign", ("topics", "reassign", "--verify", "--reassignment-json-file", p.plan, *z)),
        ("groups list", ("groups", "list", *z)),
        ("groups describe", ("groups", "describe", "--group", "g", *z)),
        ("groups reset", ("groups", "reset", "--group", "g", "--to-earliest", *z)),
        ("groups delete", ("groups", "delete", "--group", "g", *z)),
        ("acls list", ("acls", "list", *z)),
        ("users list", ("users", "list", *z)),
        ("users remove", ("users", "remove", "u", *z)),
        ("acls add", ("acls", "add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "t", *z)),
        ("acls remove", ("acls", "remove", "--topic", "t", *z)),
        ("schemas list", ("schemas", "list", *z)),
        ("schemas show", ("schemas", "show", "s", *z)),
        ("schemas register", ("schemas", "register", "s", "--schema-file", p.schema, *z)),
        ("schemas check", ("schemas", "check", "s", "--schema-file", p.schema, *z)),
        ("schemas compat", ("schemas", "compat", "s", *z)),
        ("schemas copy", ("schemas", "copy", "--from-zookeeper", NO_ZK, *z)),
        ("schemas serve", ("schemas", "serve", "--listen", f"127.0.0.1:{free_port()}", *z)),
        ("produce", ("produce", "--topic", "t", *z)),
        ("consume", ("consume", "--topic", "t", *z)),
        ("consume --group", ("consume", "--topic", "t", "--group", "g", *z)),
        ("audit report", ("audit", "report", "--offline-only", *z)),
        ("mirror status", ("mirror", "status", "--source-zookeeper", NO_ZK, "--target-zookeeper", NO_ZK)),
        ("mirror run", ("mirror", "--source-zookeeper", NO_ZK, "--target-zookeeper", NO_ZK, "--include", ".*")),
        ("mirror link create", ("mirror", "link", "create", "dc1", "--source-zookeeper", NO_ZK, "--include", "t",
                                "--zookeeper", NO_ZK)),
        ("mirror link list", ("mirror", "link", "list", "--zookeeper", NO_ZK)),
        ("mirror link describe", ("mirror", "link", "describe", "dc1", "--zookeeper", NO_ZK)),
        ("mirror link pause", ("mirror", "link", "pause", "dc1", "--zookeeper", NO_ZK)),
        ("mirror link resume", ("mirror", "link", "resume", "dc1", "--zookeeper", NO_ZK)),
        ("mirror link delete", ("mirror", "link", "delete", "dc1", "--zookeeper", NO_ZK)),
        ("mirror link alter", ("mirror", "link", "alter", "dc1", "--include", "t", "--zookeeper", NO_ZK)),
        ("load", ("load", "--zookeeper", NO_ZK, "--topics", "t", "--state-dir", str(p.root / "state-zk"))),
        ("broker", ("broker", "--id", "1", "--listen", f"127.0.0.1:{free_port()}", "--datacenter", "dc",
                    "--data-dir", str(p.root / "broker-zk"), "--zookeeper", NO_ZK, "--zk-session-timeout-ms", "2000")),
    ]
    return [Case(f"no zookeeper: {name}", argv, RUNTIME) for name, argv in cases]


def unreachable_brokers(p: Paths) -> list[Case]:
    b = ("--bootstrap-server", NO_BROKER, "--timeout", "2")
    return [Case("no broker: produce", ("produce", "--topic", "t", *b), RUNTIME, stdin="x\n"),
            Case("no broker: topics describe", ("topics", "describe", *b), RUNTIME),
            Case("no broker: topics delete", ("topics", "delete", "t", *b), RUNTIME),
            Case("no broker: configs", ("configs", "--entity-type", "topics", "--entity-name", "t", "--describe",
                                        *b), RUNTIME),
            Case("no broker: configs quotas", ("configs", "--entity-type", "users", "--entity-default", "--describe",
                                               *b), RUNTIME),
            Case("no broker: groups list", ("groups", "list", *b), RUNTIME),
            Case("no broker: consume", ("consume", "--topic", "t", *b), RUNTIME),
            Case("no broker: audit report", ("audit", "report", "--offline-only", *b), RUNTIME)]


def bad_arguments(p: Paths) -> list[Case]:
    z = ("--zookeeper", NO_ZK)
    cases = [
        ("unknown command", ("nosuch",)),
        ("zookeeper", ("zookeeper", "--data-dir", str(p.root / "zk-bad"), "--port", "0")),
        ("broker", ("broker", "--id", "x")),
        ("broker setting", ("broker", "--id", "1", "--listen", "nowhere", "--data-dir", str(p.root / "b"), *z,
                            "--datacenter", "dc")),
        ("topics", ("topics", "frobnicate")),
        ("topics create", ("topics", "create", "t", "--partitions", "x", *z)),
        ("topics create config", ("topics", "create", "t", "--partitions", "1", "--config", "novalue", *z)),
        ("topics list", ("topics", "list", "--bogus", *z)),
        ("topics describe", ("topics", "describe", "--bogus", *z)),
        ("topics alter", ("topics", "alter", "t", *z)),
        ("topics elect-leaders", ("topics", "elect-leaders", *z)),
        ("topics reassign", ("topics", "reassign", *z)),
        ("produce", ("produce", "--topic", "t", "--acks", "7", *z)),
        ("produce no cluster", ("produce", "--topic", "t")),
        ("consume", ("consume", "--topic", "t", "--max-messages", "0", *z)),
        ("groups", ("groups", "describe", *z)),
        ("groups both ways", ("groups", "list", *z, "--bootstrap-server", NO_BROKER)),
        ("configs", ("configs", "--describe", *z)),
        ("configs quotas", ("configs", "--entity-type", "clients", "--entity-name", "c", "--alter", "--add-config",
                            "producer_byte_rate=lots", *z)),
        ("configs alter nothing", ("configs", "--topic", "t", "--alter", *z)),
        ("groups reset", ("groups", "reset", "--group", "g", *z)),
        ("users", ("users", "add", "u", "--password", "pw", *z)),
        ("zookeeper-acls", ("zookeeper-acls", "lock", *z)),
        ("zookeeper-acls no credentials", ("zookeeper-acls", "secure", *z)),
        ("users iterations", ("users", "add", "u", "--password-stdin", "--iterations", "1", *z)),
        ("acls", ("acls", "add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t", *z)),
        ("acls principal", ("acls", "add", "--allow-principal", "nobody", "--operation", "Read", "--topic", "t", *z)),
        ("schemas", ("schemas", "show", *z)),
        ("schemas compat", ("schemas", "compat", "s", "--level", "SIDEWAYS", *z)),
        ("mirror", ("mirror", "--source-zookeeper", NO_ZK, "--target-zookeeper", NO_ZK)),
        ("mirror status", ("mirror", "status", "--source-zookeeper", NO_ZK)),
        ("mirror link", ("mirror", "link", *z)),
        ("mirror link action", ("mirror", "link", "frobnicate", *z)),
        ("mirror link no zookeeper", ("mirror", "link", "list")),
        ("mirror link describe no name", ("mirror", "link", "describe", *z)),
        ("mirror link create no source", ("mirror", "link", "create", "dc1", "--include", "t", *z)),
        ("mirror link create no include", ("mirror", "link", "create", "dc1", "--source-zookeeper", NO_ZK, *z)),
        ("mirror link alter nothing", ("mirror", "link", "alter", "dc1", *z)),
        ("mirror link create regex", ("mirror", "link", "create", "dc1", "--source-zookeeper", NO_ZK,
                                      "--include", "(", *z)),
        ("mirror link create name", ("mirror", "link", "create", "a/b", "--source-zookeeper", NO_ZK,
                                     "--include", "t", *z)),
        ("mirror link create source", ("mirror", "link", "create", "dc1", "--source-zookeeper", "h:x/a",
                                       "--include", "t", *z)),
        ("mirror name without link", ("mirror", "status", "extra", "--source-zookeeper", NO_ZK,
                                      "--target-zookeeper", NO_ZK)),
        ("load", ("load", "--topics", "t", "--max-per-split", "0", *z)),
        ("load no zookeeper", ("load", "--topics", "t")),
        ("sql", ("sql", "serve", "-e", "SELECT 1")),
        ("sql listen", ("sql", "serve", "--listen", "here")),
        ("sql serve exposed without TLS and auth", ("sql", "serve", "--listen", "0.0.0.0:10000")),
        ("sql serve key without certificate", ("sql", "serve", "--ssl-keyfile", p.missing)),
        ("sql serve unreadable certificate", ("sql", "serve", "--ssl-certfile", p.missing)),
        ("sql serve scram without zookeeper", ("sql", "serve", "--auth", "scram")),
        ("sql --insecure without serve", ("sql", "-e", "SELECT 1", "--insecure")),
        ("audit", ("audit", "report", "--hours", "-1", "--offline-only", *z)),
        ("audit action", ("audit", "rewrite")),
        ("dashboard", ("dashboard", "--listen", "nowhere", *z)),
        ("dashboard no zookeeper", ("dashboard",)),
        ("demo", ("demo", "--events", "0")),
        ("version", ("version", "--bogus")),
    ]
    return [Case(f"bad argument: {name}", argv, USAGE) for name, argv in cases]


def missing_files(p: Paths) -> list[Case]:
    z = ("--zookeeper", NO_ZK)
    cases = [
        ("broker --config", ("broker", "--config", p.missing)),
        ("broker --config dir", ("broker", "--config", p.a_dir)),
        ("schemas register", ("schemas", "register", "s", "--schema-file", p.missing, *z)),
        ("schemas check dir", ("schemas", "check", "s", "--schema-file", p.a_dir, *z)),
        ("topics reassign --execute", ("topics", "reassign", "--execute", "--reassignment-json-file", p.missing, *z)),
        ("topics reassign --generate", ("topics", "reassign", "--generate", "--topics-to-move-json-file", p.missing,
                                        "--broker-list", "1", *z)),
        ("sql -f", ("sql", "-f", p.missing)),
        ("mirror link create --source-config", ("mirror", "link", "create", "dc1", "--source-zookeeper", NO_ZK,
                                                "--include", "t", "--source-config", p.missing, *z)),
        ("users add --password-file", ("users", "add", "u", "--password-file", p.missing, *z)),
        ("sql empty state dir", ("sql", "-e", "SELECT 1", "--state-dir", str(p.root / "empty-state"))),
    ]
    return [Case(f"missing file: {name}", argv, RUNTIME) for name, argv in cases]


def client_configs(p: Paths) -> list[Case]:
    """--command-config (and the mirror's --source-config/--target-config, $FERRY_CLIENT_CONFIG) naming a missing
    file or one with a bad value: a usage error, before any connection is tried."""
    z = ("--zookeeper", NO_ZK)
    commands = [
        ("produce", ("produce", "--topic", "t", *z), "--command-config"),
        ("produce --producer.config", ("produce", "--topic", "t", *z), "--producer.config"),
        ("consume", ("consume", "--topic", "t", *z), "--command-config"),
        ("consume --group", ("consume", "--topic", "t", "--group", "g", *z), "--consumer.config"),
        ("groups describe", ("groups", "describe", "--group", "g", *z), "--command-config"),
        ("acls list", ("acls", "list", "--bootstrap-server", NO_BROKER), "--command-config"),
        ("audit report", ("audit", "report", "--offline-only", *z), "--command-config"),
        ("mirror run", ("mirror", "--source-zookeeper", NO_ZK, "--target-zookeeper", NO_ZK, "--include", ".*"),
         "--source-config"),
        ("mirror status", ("mirror", "status", "--source-zookeeper", NO_ZK, "--target-zookeeper", NO_ZK),
         "--target-config"),
        ("load", ("load", "--topics", "t", "--state-dir", p.a_dir, *z), "--command-config"),
        ("load live", ("load", "--topics", "t", "--state-dir", p.a_dir, *z), "--live-command-config"),
        ("dashboard", ("dashboard", "--offline-only", "--listen", f"127.0.0.1:{free_port()}", *z), "--command-config"),
        ("dashboard live", ("dashboard", "--live-zookeeper", NO_ZK, "--listen", f"127.0.0.1:{free_port()}", *z),
         "--live-command-config"),
    ]
    cases = [Case(f"client config missing: {name}", (*argv, flag, p.missing), USAGE, stdin="x\n")
             for name, argv, flag in commands]
    cases += [Case(f"client config bad value: {name}", (*argv, flag, p.bad_client_config), USAGE, stdin="x\n")
              for name, argv, flag in commands[:3]]
    cases.append(Case("client config missing: $FERRY_CLIENT_CONFIG", ("consume", "--topic", "t", *z), USAGE,
                      env=(("FERRY_CLIENT_CONFIG", p.missing),)))
    return cases


def unwritable(p: Paths) -> list[Case]:
    u = p.unwritable
    cases = [
        ("zookeeper", ("zookeeper", "--port", str(free_port()), "--data-dir", u)),
        ("broker", ("broker", "--id", "1", "--listen", f"127.0.0.1:{free_port()}", "--datacenter", "dc",
                    "--data-dir", u, "--zookeeper", NO_ZK)),
        ("load", ("load", "--zookeeper", NO_ZK, "--topics", "t", "--state-dir", u)),
        ("demo", ("demo", "--dir", u)),
    ]
    return [Case(f"not writable: {name}", argv, RUNTIME) for name, argv in cases]


def full_disk(p: Paths) -> list[Case]:
    f = p.full
    cases = [
        ("zookeeper", ("zookeeper", "--port", str(free_port()), "--data-dir", str(f / "zk"))),
        ("broker", ("broker", "--id", "1", "--listen", f"127.0.0.1:{free_port()}", "--datacenter", "dc",
                    "--data-dir", str(f / "broker"), "--zookeeper", NO_ZK)),
        ("load", ("load", "--zookeeper", NO_ZK, "--topics", "t", "--state-dir", str(f / "state"))),
        ("demo", ("demo", "--dir", str(f / "demo"))),
    ]
    return [Case(f"full disk: {name}", argv, RUNTIME) for name, argv in cases]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Paths]:
    root = tmp_path_factory.mktemp("cli-matrix")
    (root / "plan.json").write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1]}]}))
    (root / "s.avsc").write_text(json.dumps({"type": "record", "name": "R", "fields": []}))
    (root / "empty-state").mkdir()
    (root / "bad-client.properties").write_text("security.protocol=TLS\n")
    full = root / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True, timeout=30)
    try:
        with open(full / "filler", "wb") as f:  # fill it: every later write there fails with ENOSPC
            try:
                f.write(b"\0" * (1 << 20))
            except OSError:
                pass
        yield Paths(root, full)
    finally:
        subprocess.run(["umount", str(full)], check=True, timeout=30)


def run_case(case: Case, cwd: Path, home: Path) -> tuple[Case, subprocess.CompletedProcess | str, list[str]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("FERRY_ZOOKEEPER", "FERRY_STATE_DIR", "FERRY_METASTORE", "XDG_STATE_HOME", "FERRY_DEBUG")}
    cwd.mkdir(parents=True)
    try:
        proc = subprocess.run([FERRY, *case.argv], cwd=cwd, input=case.stdin, capture_output=True, text=True,
                              timeout=CASE_TIMEOUT_S, env={**env, "HOME": str(home), **dict(case.env)})
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return case, err, sorted(x.name for x in cwd.iterdir())
    return case, proc, sorted(x.name for x in cwd.iterdir())


def _problems(cases: list[Case], tmp_path: Path) -> list[str]:
    """Run the cases in parallel; what each did wrong under the rule."""
    home = tmp_path / "home"
    home.mkdir()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda ic: run_case(ic[1], tmp_path / f"cwd-{ic[0]}", home), enumerate(cases)))
    problems = []
    for case, proc, left in results:
        if isinstance(proc, str):
            problems.append(f"{case.name}: no answer within {CASE_TIMEOUT_S} s; stderr so far: {proc[-500:]}")
            continue
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        why = []
        if proc.returncode != case.rc:
            why.append(f"exit {proc.returncode}, not {case.rc}")
        if len(lines) != 1:
            why.append(f"{len(lines)} stderr lines")
        if "Traceback" in proc.stderr:
            why.append("a traceback")
        if left:
            why.append(f"left {left} in the working directory")
        if why:
            problems.append(f"{case.name}: {', '.join(why)}: {' '.join(case.argv)}\n    " + "\n    ".join(lines[:6]))
    shutil.rmtree(home, ignore_errors=True)
    assert not (home / ".local").exists()
    return problems


@pytest.mark.slow  # ~90 processes, most waiting out a ZooKeeper or broker timeout: ~100 s on 2 busy cores
def test_every_command_fails_in_one_line_with_the_right_exit_code(paths: Paths, tmp_path: Path) -> None:
    cases = [*unreachable_zookeeper(paths), *unreachable_brokers(paths), *bad_arguments(paths),
             *missing_files(paths), *client_configs(paths), *unwritable(paths), *full_disk(paths)]
    problems = _problems(cases, tmp_path)
    assert not problems, f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(problems)


def test_the_matrix_covers_every_command(paths: Paths) -> None:
    """A command added to `ferry` without its rows here would escape the rule's test."""
    cases = [*unreachable_zookeeper(paths), *unreachable_brokers(paths), *bad_arguments(paths),
             *missing_files(paths), *client_configs(paths), *unwritable(paths), *full_disk(paths)]
    assert set(COMMANDS) - {case.argv[0] for case in cases} == set()


def test_the_rule_classifies_the_projects_errors() -> None:
    """The classes behind the matrix, one by one (ferry/cli_runner.py): who is at fault decides the code."""
    import errno

    from kazoo.handlers.threading import KazooTimeoutError

    from ferry.cli_runner import describe, exit_code
    from ferry.client.errors import BrokerUnavailableError, NoBrokersAvailableError
    from ferry.schemas.errors import IncompatibleSchemaError
    from ferry.zk import InvalidZkConnectError, RegistryError, UnknownTopicError, ZooKeeperUnavailableError
    from ferry.zk.cli_args import UsageError

    runtime = [ZooKeeperUnavailableError("cannot connect"), BrokerUnavailableError("no broker"), KazooTimeoutError(),
               NoBrokersAvailableError("none"), FileNotFoundError(errno.ENOENT, "No such file or directory", "/x"),
               OSError(errno.ENOSPC, "No space left on device"), KeyError("a bug")]
    usage = [UsageError("--x"), ValueError("bad"), InvalidZkConnectError("h:99999"), UnknownTopicError("topic 't'"),
             RegistryError("no /chroot"), IncompatibleSchemaError("field f")]
    assert [exit_code(e) for e in runtime] == [RUNTIME] * len(runtime)
    assert [exit_code(e) for e in usage] == [USAGE] * len(usage)
    assert describe(FileNotFoundError(errno.ENOENT, "No such file or directory", "/x")) == "No such file or directory: /x"
    assert describe(KeyError("a bug")) == "KeyError: 'a bug'"  # a surprise names its class
    assert describe(ValueError("two\nlines")) == "two lines"
