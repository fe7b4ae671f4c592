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
    LIVE_ZK,
    MIRROR_COMMAND,
    OFFLINE_ZK,
    Datacenters,
    broker_command,
    start_role,
    wait_log,
    wait_registered,
    wait_zookeeper,
)
from ferry_docker_helpers import build_images, docker, docker_or_skip  # noqa: E402

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


@pytest.fixture(scope="session")
def datacenters(tmp_path_factory: pytest.TempPathFactory):
    docker_or_skip()
    t0 = time.monotonic()
    images = build_images("ferry", "loader")
    run_id = uuid.uuid4().hex[:6]
    roles = ["live-zk", "live-broker-1", "live-broker-2", "offline-zk", "offline-broker-1", "mirror", "loader"]
    dcs = Datacenters(run_id=run_id, names={r: f"ferry-{run_id}-{r}" for r in roles}, networks={}, images=images)
    dcs.timings["images"] = time.monotonic() - t0
    # Event times of the test: the hour two hours ago (complete, and clear of the hour boundary).
    now_ms = int(time.time() * 1000)
    dcs.hour_ms = now_ms - now_ms % 3_600_000 - 2 * 3_600_000
    try:
        from testcontainers.core.network import Network

        for dc in ("live", "offline"):
            # internal: no route out; only the project's own containers are on it
            net = Network(docker_network_kw={"internal": True, "labels": {"org.ferry.test": run_id}})
            net.name = f"ferry-{dc}-{run_id}"
            net.create()
            dcs.network_objects[dc] = net
            dcs.networks[dc] = net.name
        t1 = time.monotonic()
        ferry, loader = images["FERRY_IMAGE"], images["FERRY_LOADER_IMAGE"]
        zk_cmd = ["ferry", "zookeeper", "--port", "2181", "--data-dir", "/var/lib/ferry/zookeeper", "--host", "0.0.0.0"]
        start_role(dcs, "live-zk", ferry, zk_cmd, ["live"])
        start_role(dcs, "offline-zk", ferry, zk_cmd, ["offline"])
        for role in ("live-zk", "offline-zk"):
            wait_zookeeper(dcs, role)
        start_role(dcs, "live-broker-1", ferry, broker_command(1, "live-broker-1", LIVE_ZK, "live"), ["live"])
        start_role(dcs, "live-broker-2", ferry, broker_command(2, "live-broker-2", LIVE_ZK, "live"), ["live"])
        start_role(dcs, "offline-broker-1", ferry, broker_command(1, "offline-broker-1", OFFLINE_ZK, "offline"),
               ["offline"])
        wait_registered(dcs, "live-broker-1", LIVE_ZK, 1)
        wait_registered(dcs, "live-broker-1", LIVE_ZK, 2)
        wait_registered(dcs, "offline-broker-1", OFFLINE_ZK, 1)
        setup = dcs.workload("live-broker-1", "setup", "--zookeeper", LIVE_ZK)
        assert setup["_rc"] == 0, setup
        start_role(dcs, "mirror", ferry, MIRROR_COMMAND, ["offline", "live"])
        wait_log(dcs, "mirror", " owns ")
        start_role(dcs, "loader", loader, ["sleep", "infinity"], ["offline"])
        dcs.timings["start"] = time.monotonic() - t1
        print(f"\n[integration] images {dcs.timings['images']:.1f}s, datacenters up in {dcs.timings['start']:.1f}s")
        yield dcs
    finally:
        if os.environ.get("FERRY_KEEP_CONTAINERS"):
            print(f"[integration] FERRY_KEEP_CONTAINERS: leaving {list(dcs.names.values())}")
        else:
            for c in dcs.containers.values():
                try:
                    c.stop()
                except Exception:  # already gone: nothing to clean
                    pass
            docker("rm", "-f", *dcs.names.values(), check=False, timeout=120)
            for net in dcs.networks.values():
                docker("network", "rm", net, check=False)
