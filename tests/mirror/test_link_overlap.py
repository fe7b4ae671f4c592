"""One link per live cluster (docs/mirror.md): a second link to a live cluster a link already copies from is
refused by `ferry mirror link create` (one line, exit 2), and one that reaches the same live cluster under
another address copies nothing the first one copies: it says "failed: topic T is copied by link L" in describe,
status and /metrics, and the offline partition holds every message once (real ZooKeeper, real brokers)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mirror_harness import produce, read_log, wait_for, wait_partitions
from test_embedded_mirror import link, metrics

from ferry.embedded import free_port
from ferry.zk.cluster_registry import ClusterRegistry

pytestmark = pytest.mark.slow


def doc(offline, name: str) -> dict:
    out = link(offline, "describe", name, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_live_cluster_reached_under_two_addresses_is_copied_once(cluster_factory) -> None:
    port = free_port()
    live = cluster_factory(1, "live")
    with ClusterRegistry(live.zk_connect) as reg:
        reg.create_topic("views", 2)
        reg.create_topic("clicks", 1)
    wait_partitions(live.bootstrap, "views", 2)
    wait_partitions(live.bootstrap, "clicks", 1)
    offline = cluster_factory(1, "offline", extra_args=("--metrics-listen", f"127.0.0.1:{port}"))
    produce(live.bootstrap, "views", 2, 300)
    produce(live.bootstrap, "clicks", 1, 50)
    # "zz" is the older link: it keeps what both select, whatever the names' order
    made = link(offline, "create", "zz", "--source-zookeeper", live.zk_connect, "--include", "views|clicks")
    assert made.returncode == 0, made.stderr
    wait_partitions(offline.bootstrap, "views", 2, timeout=60)
    want = {"views": 2, "clicks": 1}
    wait_for(lambda: read_log(offline.bootstrap, want, 20) == read_log(live.bootstrap, want, 20), 90, "zz's copy")
    # the same address again: refused, one line, exit 2, nothing stored
    again = link(offline, "create", "aa", "--source-zookeeper", live.zk_connect, "--include", "views")
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert "mirror link 'zz' already copies from" in again.stderr
    assert [line.split("\t")[0] for line in link(offline, "list").stdout.splitlines()] == ["zz"]
    # the same live cluster under another name of its ZooKeeper host: stored, but it copies nothing of views
    other = live.zk_connect.replace("127.0.0.1:", "localhost:", 1)
    assert other != live.zk_connect
    made = link(offline, "create", "aa", "--source-zookeeper", other, "--include", "views")
    assert made.returncode == 0, made.stderr
    wait_for(lambda: doc(offline, "aa")["state"] == "failed: topic views is copied by link zz", 30,
             "aa to say zz copies views")
    produce(live.bootstrap, "views", 2, 200, start=300, tag="more-")
    wait_for(lambda: read_log(offline.bootstrap, want, 20) == read_log(live.bootstrap, want, 20), 90,
             "zz's copy of the new messages")
    aa, zz = doc(offline, "aa"), doc(offline, "zz")
    assert aa["partitions"] == [] and aa["source_cluster"] == zz["source_cluster"] is not None
    assert zz["state"] == "running" and {(p["topic"], p["copied_to"]) for p in zz["partitions"]} == \
        {("views", 250), ("clicks", 50)}
    rows = read_log(offline.bootstrap, {"views": 2})
    assert sum(len(r) for r in rows.values()) == 500 and all(len(set(r)) == len(r) for r in rows.values())
    # status and /metrics say the same
    status = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "status", "--zookeeper",
                             offline.zk_connect, "--json"], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    states = {lk["name"]: lk["state"] for lk in json.loads(status.stdout)["links"]}
    assert states == {"aa": "failed: topic views is copied by link zz", "zz": "running"}
    scraped = metrics(port)
    assert scraped['ferry_mirror_link_failed{link="aa"}'] == 1.0
    assert scraped['ferry_mirror_link_failed{link="zz"}'] == 0.0
    assert not any('link="aa"' in k and "copied_to" in k for k in scraped)
