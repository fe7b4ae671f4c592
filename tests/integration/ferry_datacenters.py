"""Helpers of the integration tests: the two datacenters' containers and what runs inside them.

Two datacenters in containers (testcontainers): live ZooKeeper + 2 brokers on ferry-live-<id>,
offline ZooKeeper + 1 broker on ferry-offline-<id> and on the live network too (its mirror link pulls from the
live brokers: the embedded mirror, docs/mirror.md), and a loader host; secured
(SASL_SSL, ACLs, ZooKeeper digest ACLs) with the secrets of secured_datacenters.py mounted at /etc/ferry.

The images come from infra/images/build.sh (built here, reused when nothing changed). Every container
runs one ferry command as in production (`ferry zookeeper`, `ferry broker`; the link is made with
`ferry mirror link create` in the offline broker's container); the tests
drive the workload with `docker exec` inside the datacenters (tests/integration/workload.py), because
the networks are internal: nothing outside them, this process included, can reach the brokers.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))
from ferry_docker_helpers import DockerError, docker  # noqa: E402

WORKLOAD = (Path(__file__).parent / "workload.py").read_bytes()
LIVE_ZK = "live-zk:2181/ferry/live"
OFFLINE_ZK = "offline-zk:2181/ferry/offline"


@dataclass
class Datacenters:
    """The running containers by role, and the counts of what the tests published."""

    run_id: str
    names: dict[str, str]  # role -> container name
    networks: dict[str, str]  # live/offline -> network name
    images: dict[str, str]
    containers: dict = field(default_factory=dict)  # role -> testcontainers DockerContainer
    network_objects: dict = field(default_factory=dict)  # live/offline -> testcontainers Network
    produced: dict[str, int] = field(default_factory=dict)  # topic -> published so far
    hour_ms: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    # librdkafka files (paths in the containers) of the workload: the producers' and the counts' (secured)
    publish_config: str | None = None
    count_config: str | None = None

    # -- running things inside ----------------------------------------------------------------------
    def workload(self, role: str, *args: str, timeout: float = 180, script: bytes = WORKLOAD) -> dict:
        """Run `script` (workload.py unless given) in `role`'s container; its last `RESULT <json>` line."""
        p = docker("exec", "-i", self.names[role], "python", "-", *args, input=script, timeout=timeout, check=False)
        out = p.stdout.decode(errors="replace")
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        if not lines:
            raise DockerError(f"workload {args[0]} in {role} failed (rc {p.returncode}):\n{out[-3000:]}\n"
                              f"{p.stderr.decode(errors='replace')[-3000:]}")
        result = json.loads(lines[-1][len("RESULT "):])
        result["_rc"] = p.returncode
        return result

    def publish(self, count: int, seed: int, app: str = "frontend", role: str = "live-broker-1",
                timeout: int = 180) -> dict[str, int]:
        """Publish `count` audited Avro events of the test hour from inside the live datacenter."""
        r = self.workload(role, "publish", "--zookeeper", LIVE_ZK, "--count", str(count), "--hour-ms",
                          str(self.hour_ms), "--seed", str(seed), "--app", app, "--timeout", str(timeout),
                          *self.config_args(self.publish_config), timeout=timeout + 60)
        assert r["_rc"] == 0 and r["_undelivered"] == 0, f"publish: {r}"
        for topic, n in r.items():
            if not topic.startswith("_"):
                self.produced[topic] = self.produced.get(topic, 0) + n
        return r

    @staticmethod
    def config_args(path: str | None) -> list[str]:
        return ["--command-config", path] if path else []

    def count(self, dc: str) -> dict:
        role = "live-broker-1" if dc == "live" else "offline-broker-1"
        zk = LIVE_ZK if dc == "live" else OFFLINE_ZK
        r = self.workload(role, "count", "--zookeeper", zk, *self.config_args(self.count_config))
        if r["_rc"] != 0 or "_error" in r or "_incomplete" in r:
            raise DockerError(f"count in {dc} failed: {r}")
        return {t: v for t, v in r.items() if not t.startswith("_")}

    def wait_offline_has_everything(self, timeout: float = 180) -> dict:
        """Until the offline cluster holds every published event (by count), bounded in time. A count that fails
        is tried again until then: right after a kill -9 the restarted broker waits out its killed session's
        registration (up to the session timeout), and a count in between finds no broker registered."""
        deadline = time.monotonic() + timeout
        got: dict = {}
        failed: DockerError | None = None
        while time.monotonic() < deadline:
            try:
                got, failed = self.count("offline"), None
            except DockerError as e:
                failed = e
            else:
                if all(got.get(t, {}).get("total", 0) >= n for t, n in self.produced.items()):
                    return got
            time.sleep(2)
        raise AssertionError(f"offline never caught up in {timeout:.0f}s: produced {self.produced}, offline {got}"
                             + (f", last count: {failed}" if failed else "") + "\n"
                             + self.logs("offline-broker-1", 60))

    def logs(self, role: str, tail: int = 80) -> str:
        p = docker("logs", "--tail", str(tail), self.names[role], check=False, timeout=30)
        return f"--- {role} ---\n" + (p.stdout + p.stderr).decode(errors="replace")


def create_network(dcs: Datacenters, dc: str) -> None:
    """The datacenter's network: internal (no route out), only the project's own containers are on it."""
    from testcontainers.core.network import Network

    net = Network(docker_network_kw={"internal": True, "labels": {"org.ferry.test": dcs.run_id}})
    net.name = f"ferry-{dc}-{dcs.run_id}"
    net.create()
    dcs.network_objects[dc] = net
    dcs.networks[dc] = net.name


def remove_all(dcs: Datacenters) -> None:
    """Teardown: every container and network of the run (left in place with FERRY_KEEP_CONTAINERS)."""
    if os.environ.get("FERRY_KEEP_CONTAINERS"):
        print(f"[integration] FERRY_KEEP_CONTAINERS: leaving {list(dcs.names.values())}")
        return
    for c in dcs.containers.values():
        try:
            c.stop()
        except Exception:  # already gone: nothing to clean
            pass
    docker("rm", "-f", *dcs.names.values(), check=False, timeout=120)
    for net in dcs.networks.values():
        docker("network", "rm", net, check=False)


def start_role(dcs: Datacenters, role: str, image: str, command: list[str], networks: list[str],
               etc: Path | None = None) -> None:
    """Start `role` on its datacenter network(s), reachable there by the name `role`. ``etc``: the role's
    secrets directory (secured_datacenters.py), mounted read-only at /etc/ferry, with the ZooKeeper identity
    in it named by $FERRY_ZOOKEEPER_CREDENTIALS for every ferry process of the container."""
    from testcontainers.core.container import DockerContainer

    name = dcs.names[role]
    c = DockerContainer(image, name=name, hostname=role, labels={"org.ferry.test": dcs.run_id})
    c.with_command(command).with_env("PYTHONUNBUFFERED", "1")
    if etc is not None:
        c.with_volume_mapping(str(etc), "/etc/ferry", "ro")
        c.with_env("FERRY_ZOOKEEPER_CREDENTIALS", "/etc/ferry/zk-credentials")
    c.with_network(dcs.network_objects[networks[0]]).with_network_aliases(role)
    c.start()
    for net in networks[1:]:
        docker("network", "connect", "--alias", role, dcs.networks[net], name)
    dcs.containers[role] = c


def wait_zookeeper(dcs: Datacenters, role: str, timeout: float = 60) -> None:
    code = ("import socket,sys,time; d=time.time()+float(sys.argv[1])\n"
            "while time.time()<d:\n"
            "  try:\n"
            "    s=socket.create_connection(('127.0.0.1',2181),1); s.sendall(b'srvr'); ok=b'Mode' in s.recv(512)\n"
            "    if ok: sys.exit(0)\n"
            "  except OSError: pass\n"
            "  time.sleep(0.2)\n"
            "sys.exit(1)")
    p = docker("exec", dcs.names[role], "python", "-c", code, str(timeout), timeout=timeout + 30, check=False)
    assert p.returncode == 0, f"{role} never served\n{dcs.logs(role)}"


def wait_log(dcs: Datacenters, role: str, needle: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in dcs.logs(role, 400):
            return
        if docker("inspect", "-f", "{{.State.Running}}", dcs.names[role], check=False).stdout.strip() != b"true":
            break
        time.sleep(0.5)
    raise AssertionError(f"{role}: no {needle!r} after {timeout:.0f}s\n{dcs.logs(role)}")


def wait_registered(dcs: Datacenters, broker_role: str, zk: str, broker_id: int, timeout: float = 60) -> None:
    code = ("import sys,time,kazoo.client as k; z=k.KazooClient(sys.argv[1]); z.start(20); d=time.time()+float(sys.argv[3])\n"
            "while time.time()<d and not z.exists('/brokers/ids/'+sys.argv[2]): time.sleep(0.2)\n"
            "sys.exit(0 if z.exists('/brokers/ids/'+sys.argv[2]) else 1)")
    p = docker("exec", dcs.names[broker_role], "python", "-c", code, zk, str(broker_id), str(timeout),
               timeout=timeout + 30, check=False)
    assert p.returncode == 0, f"broker {broker_id} never registered in {zk}\n{dcs.logs(broker_role)}"


def broker_command(broker_id: int, role: str, zk: str, dc: str, extra: Sequence[str] = ()) -> list[str]:
    """`ferry broker` as the datacenters run it; `extra`: more flags (e.g. `--override KEY=VALUE`)."""
    return ["ferry", "broker", "--id", str(broker_id), "--listen", "0.0.0.0:9092", "--advertised", f"{role}:9092",
            "--data-dir", "/var/lib/ferry/broker", "--zookeeper", zk, "--datacenter", dc,
            "--zk-session-timeout-ms", "6000", *extra]


def secured_broker_command(broker_id: int, zk: str, dc: str) -> list[str]:
    """`ferry broker` of the secured datacenters: listeners, TLS, SASL and the authorizer come from its
    /etc/ferry/broker.properties (secured_datacenters.py)."""
    return ["ferry", "broker", "--id", str(broker_id), "--config", "/etc/ferry/broker.properties",
            "--data-dir", "/var/lib/ferry/broker", "--zookeeper", zk, "--datacenter", dc,
            "--zk-session-timeout-ms", "6000"]


# The mirror link: stored in the offline ZooKeeper, run by the offline broker, which logs in to live over SASL_SSL
# as the link's own user (its client file in the offline broker's /etc/ferry) and writes offline as itself.
# `_audit` named: the live producers' counts travel too (the standalone mirror's mirrored_include does the same).
LINK = "live"
LINK_CLIENT = "/etc/ferry/mirror-link.properties"
LINK_CREATE = ["mirror", "link", "create", LINK, "--zookeeper", OFFLINE_ZK, "--source-zookeeper", LIVE_ZK,
               "--include", ".*|_audit", "--source-config", LINK_CLIENT]
LIVE_CLIENT = "/etc/ferry/frontend.properties"  # in live-broker-1: the app producers' user
OPS_CLIENT = "/etc/ferry/ops.properties"  # in live-broker-1 and offline-broker-1: the counts
LOADER_CLIENT = "/etc/ferry/loader.properties"  # in loader: `ferry load` and the audit report


def ferry_cli(dcs: Datacenters, role: str, *args: str, stdin: str | None = None, timeout: float = 60) -> None:
    """A `ferry` command in ``role``'s container; fails the setup with its output unless it exits 0."""
    p = docker("exec", *(["-i"] if stdin is not None else []), dcs.names[role], "ferry", *args,
               input=stdin.encode() if stdin is not None else None, timeout=timeout, check=False)
    if p.returncode != 0:
        raise DockerError(f"ferry {args[0]} {args[1] if len(args) > 1 else ''} in {role} failed "
                          f"(rc {p.returncode}): {(p.stdout + p.stderr).decode(errors='replace')[-2000:]}")
