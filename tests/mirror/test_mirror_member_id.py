"""A mirror that has not completed its start-up never acts on the live group as its member id (issue 36.2): beside
a healthy mirror copying under production, a second `ferry mirror` with the same --consumer-id is refused at once
naming the holder, and one whose offline cluster does not answer stops before it registers. The healthy mirror
keeps every partition (its owner nodes are never re-created: no rebalance) and nothing is lost."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from mirror_harness import (
    MirrorProcess,
    SteadyProducer,
    clusters_with_topics,
    mirrored_to_end,
    read_log,
    wait_for,
)

from ferry.client import group_dirs as dirs
from ferry.mirror.status import mirror_status
from ferry.zk import connect as zk_connect
from ferry.zk.zk_connect import ZkConnect

pytestmark = pytest.mark.slow  # mirror processes under production

TOPICS = {"events": 4}
GROUP = "ferry-mirror"


def group_nodes(zk: str) -> dict[str, int]:
    """Every node of the group's ids/ and owners/ with its creation zxid: a rebalance re-creates owner nodes."""
    client = zk_connect(ZkConnect.parse(zk), timeout=10.0)
    try:
        out = {}
        for member in client.get_children(dirs.ids_dir(GROUP)):
            out[f"ids/{member}"] = client.get(f"{dirs.ids_dir(GROUP)}/{member}")[1].czxid
        owners = dirs.owners_dir(GROUP)
        for topic in client.get_children(owners):
            for p in client.get_children(f"{owners}/{topic}"):
                out[f"owners/{topic}/{p}"] = client.get(f"{owners}/{topic}/{p}")[1].czxid
        return out
    finally:
        client.stop()
        client.close()


def run_mirror(source: str, target: str, *extra: str) -> tuple[int, list[str], float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "--source-zookeeper", source,
                        "--target-zookeeper", target, "--include", "events", *extra],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, [ln for ln in p.stderr.splitlines() if ln.strip()], time.monotonic() - t0


def test_a_second_mirror_never_acts_as_a_healthy_members_id(cluster_factory, tmp_path) -> None:
    live, offline = clusters_with_topics(cluster_factory, TOPICS)
    healthy = MirrorProcess(tmp_path / "healthy.log", live.zk_connect, offline.zk_connect, "events",
                            "--consumer-id", "mirror-a", "--commit-interval", "0.5").start()
    producer = SteadyProducer(live.bootstrap, TOPICS, rate=1500).start()
    try:
        everything = {("events", p) for p in range(4)}

        def owns_everything() -> bool:
            try:
                rows = mirror_status(live.zk_connect, offline.zk_connect, GROUP).partitions
            except Exception:  # noqa: BLE001 - not registered yet
                return False
            return {(r.topic, r.partition) for r in rows if r.owner == "mirror-a"} >= everything

        wait_for(owns_everything, 60, "the healthy mirror to own every partition")
        time.sleep(2)  # copying under production
        before = group_nodes(live.zk_connect)
        assert "ids/mirror-a" in before and sum(k.startswith("owners/events/") for k in before) == 4, before

        # the same member id: refused at once, one line naming the holder (this host, the healthy one's pid)
        rc, lines, took = run_mirror(live.zk_connect, offline.zk_connect, "--consumer-id", "mirror-a")
        assert rc == 1 and len(lines) == 1, lines
        assert "'mirror-a' is held in group 'ferry-mirror' by a live member at " \
               f"{socket.gethostname()} (pid {healthy.pid})" in lines[0], lines

        # another id, but its offline cluster's brokers do not answer: it stops before it joins the group
        no_brokers = f"{offline.zk_connect.rsplit('/', 1)[0]}/no-brokers-here"
        rc, lines, start_up = run_mirror(live.zk_connect, no_brokers, "--consumer-id", "mirror-b")
        assert rc == 1 and len(lines) == 1 and "the offline cluster's brokers" in lines[0], lines
        assert "not joining group 'ferry-mirror'" in lines[0], lines
        # at once: no longer than that start-up (which stops as early), where waiting out the holder's session
        # (6 s) and the margin (2 s) would take 8 s more
        assert took < start_up + 4, f"refused after {took:.1f} s (start-up alone: {start_up:.1f} s): not at once"

        assert group_nodes(live.zk_connect) == before  # no member came or went, no owner node re-created
        assert healthy.running
        sent = producer.stop()
        wait_for(lambda: mirrored_to_end(live, offline, TOPICS), 120, "the healthy mirror to copy everything")
        src, dst = read_log(live.bootstrap, TOPICS), read_log(offline.bootstrap, TOPICS)
        assert sum(len(v) for v in src.values()) == sent > 0
        for tp, rows in src.items():
            assert dst[tp] == rows, f"{tp}: offline differs from live"
        assert group_nodes(live.zk_connect) == before
    finally:
        producer.close()
        healthy.stop()
