"""Fixtures of the two-datacenter integration tests (helpers: ferry_datacenters.py beside this file)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))
from ferry_datacenters import (  # noqa: E402
    LINK,
    LINK_CREATE,
    LIVE_CLIENT,
    LIVE_ZK,
    OFFLINE_ZK,
    OPS_CLIENT,
    Datacenters,
    broker_command,
    create_network,
    ferry_cli,
    remove_all,
    secured_broker_command,
    start_role,
    wait_log,
    wait_registered,
    wait_zookeeper,
)
from ferry_docker_helpers import build_images, docker_or_skip  # noqa: E402
from secured_datacenters import Secrets, acl_commands, make_secrets, users  # noqa: E402

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


@pytest.fixture(scope="session")
def datacenters(tmp_path_factory: pytest.TempPathFactory):
    """The two datacenters, secured (issue 38; who may do what: secured_datacenters.py): SASL_SSL listeners with
    SCRAM-SHA-512 and a certificate per broker for its network name, the brokers among themselves over SASL_SSL
    as a super user, the authorizer with least-privilege ACLs per role, ZooKeeper znodes locked with a digest
    identity, and the mirror link on the offline broker (on both networks) reading live over SASL_SSL as its user."""
    docker_or_skip()
    t0 = time.monotonic()
    images = build_images("ferry", "loader")
    run_id = uuid.uuid4().hex[:6]
    roles = ["live-zk", "live-broker-1", "live-broker-2", "offline-zk", "offline-broker-1", "loader"]
    dcs = Datacenters(run_id=run_id, names={r: f"ferry-{run_id}-{r}" for r in roles}, networks={}, images=images,
                      publish_config=LIVE_CLIENT, count_config=OPS_CLIENT)
    dcs.timings["images"] = time.monotonic() - t0
    # Event times of the test: the hour two hours ago (complete, and clear of the hour boundary).
    now_ms = int(time.time() * 1000)
    dcs.hour_ms = now_ms - now_ms % 3_600_000 - 2 * 3_600_000
    try:
        for dc in ("live", "offline"):
            create_network(dcs, dc)
        t1 = time.monotonic()
        secrets = make_secrets(tmp_path_factory.mktemp("secrets"), roles)
        ferry, loader = images["FERRY_IMAGE"], images["FERRY_LOADER_IMAGE"]
        zk_cmd = ["ferry", "zookeeper", "--port", "2181", "--data-dir", "/var/lib/ferry/zookeeper", "--host", "0.0.0.0"]
        start_role(dcs, "live-zk", ferry, zk_cmd, ["live"], secrets.dir("live-zk"))
        start_role(dcs, "offline-zk", ferry, zk_cmd, ["offline"], secrets.dir("offline-zk"))
        start_role(dcs, "loader", loader, ["sleep", "infinity"], ["offline"], secrets.dir("loader"))
        for role in ("live-zk", "offline-zk"):
            wait_zookeeper(dcs, role)
        secure_clusters(dcs, secrets)
        start_role(dcs, "live-broker-1", ferry, secured_broker_command(1, LIVE_ZK, "live"), ["live"],
                   secrets.dir("live-broker-1"))
        start_role(dcs, "live-broker-2", ferry, secured_broker_command(2, LIVE_ZK, "live"), ["live"],
                   secrets.dir("live-broker-2"))
        start_role(dcs, "offline-broker-1", ferry, secured_broker_command(1, OFFLINE_ZK, "offline"),
                   ["offline", "live"], secrets.dir("offline-broker-1"))
        wait_registered(dcs, "live-broker-1", LIVE_ZK, 1)
        wait_registered(dcs, "live-broker-1", LIVE_ZK, 2)
        wait_registered(dcs, "offline-broker-1", OFFLINE_ZK, 1)
        setup = dcs.workload("live-broker-1", "setup", "--zookeeper", LIVE_ZK)
        assert setup["_rc"] == 0, setup
        ferry_cli(dcs, "offline-broker-1", *LINK_CREATE)
        wait_log(dcs, "offline-broker-1", f"mirror link {LINK}: running from")
        dcs.timings["start"] = time.monotonic() - t1
        print(f"\n[integration] images {dcs.timings['images']:.1f}s, datacenters up in {dcs.timings['start']:.1f}s")
        yield dcs
    finally:
        remove_all(dcs)


def secure_clusters(dcs: Datacenters, secrets: Secrets) -> None:
    """Before any broker starts: each cluster's SCRAM users and ACLs, written by `ferry users add` and `ferry acls
    add` in its ZooKeeper's container (with the digest identity, so the znodes are locked from the start); the
    two datacenters side by side (each command is a Python start-up)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(dc: str, zk: str) -> None:
        role = f"{dc}-zk"
        for user in users(dc):
            ferry_cli(dcs, role, "users", "add", user, "--mechanism", "SCRAM-SHA-512", "--password-stdin",
                      "--zookeeper", zk, stdin=secrets.password(dc, user) + "\n")
        for acl in acl_commands(dc):
            ferry_cli(dcs, role, "acls", "add", "--zookeeper", zk, *acl)

    with ThreadPoolExecutor(2) as pool:
        for f in [pool.submit(one, "live", LIVE_ZK), pool.submit(one, "offline", OFFLINE_ZK)]:
            f.result()


# The replicated datacenter (test_replicated_datacenter.py): fast failure detection (a 6 s ZooKeeper
# session, as every broker here; a 3 s replica lag) and no automatic preferred-leader rebalance, so that
# a leadership the test moved stays where it is while the test looks at it.
REPLICATED_BROKER_ARGS = ("--override", "min.insync.replicas=2", "--override", "default.replication.factor=3",
                          "--override", "replica.lag.time.max.ms=3000",
                          "--override", "replica.fetch.wait.max.ms=200",
                          "--override", "auto.leader.rebalance.enable=false")


@pytest.fixture(scope="module")
def replicated_datacenter():
    """One live datacenter of three brokers (ZooKeeper + brokers 1-3 on ferry-live-<id>, started as the
    two-datacenter suite starts its live DC) and an idle `live-client` container on the same network, where
    the producer and the probes run: it must stay connected while a broker's container is cut off."""
    docker_or_skip()
    t0 = time.monotonic()
    images = build_images("ferry")
    run_id = uuid.uuid4().hex[:6]
    roles = ["live-zk", "live-broker-1", "live-broker-2", "live-broker-3", "live-client"]
    dcs = Datacenters(run_id=run_id, names={r: f"ferry-{run_id}-{r}" for r in roles}, networks={}, images=images)
    dcs.timings["images"] = time.monotonic() - t0
    try:
        create_network(dcs, "live")
        t1 = time.monotonic()
        ferry = images["FERRY_IMAGE"]
        zk_cmd = ["ferry", "zookeeper", "--port", "2181", "--data-dir", "/var/lib/ferry/zookeeper", "--host", "0.0.0.0"]
        start_role(dcs, "live-zk", ferry, zk_cmd, ["live"])
        wait_zookeeper(dcs, "live-zk")
        for i in (1, 2, 3):
            start_role(dcs, f"live-broker-{i}", ferry,
                       broker_command(i, f"live-broker-{i}", LIVE_ZK, "live", REPLICATED_BROKER_ARGS), ["live"])
        start_role(dcs, "live-client", ferry, ["sleep", "infinity"], ["live"])
        for i in (1, 2, 3):
            wait_registered(dcs, "live-client", LIVE_ZK, i)
        dcs.timings["start"] = time.monotonic() - t1
        print(f"\n[integration] images {dcs.timings['images']:.1f}s, "
              f"three-broker datacenter up in {dcs.timings['start']:.1f}s")
        yield dcs
    finally:
        remove_all(dcs)
