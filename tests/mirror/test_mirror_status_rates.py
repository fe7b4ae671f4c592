"""`ferry mirror status`: the standalone mirror's rows carry lag in seconds and messages per second, meaning what
the link rows mean (the age of the last copied message while more waits; the copy's rate), read from a real live
broker and the group's committed offsets in ZooKeeper (no mirror process needed: status reads from outside)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from mirror_harness import clusters_with_topics, produce

from ferry.client.group_store import write_offset
from ferry.mirror.status import mirror_status
from tests.client.group_helpers import zk_client

ROOT = Path(__file__).resolve().parents[2]
AGE_MS = 600_000  # the produced records are ten minutes old and more


def test_standalone_rows_lag_seconds_and_rate(cluster_factory) -> None:
    live, offline = clusters_with_topics(cluster_factory, {"views": 2})
    ts0 = int(time.time() * 1000) - AGE_MS - 400 * 1000
    # 200 records per partition, record i at ts0 + i s: the record before offset 150 of partition 0 is record
    # 2*149 (partitions take alternate records), ts0 + 298 s
    produce(live.bootstrap, "views", 2, 400, ts0=ts0, ts_step_ms=1000, compression="none",
            config={"batch.num.messages": 1, "linger.ms": 0})
    zk = zk_client(live.zk_connect)
    try:
        write_offset(zk, "ferry-mirror", "views", 0, 150)  # behind: 50 wait
        write_offset(zk, "ferry-mirror", "views", 1, 200)  # caught up

        def commit_later() -> None:  # the mirror's next commit, 1 s later: 100 more copied
            time.sleep(1.0)
            write_offset(zk, "ferry-mirror", "views", 0, 250 - 100)  # unchanged offset rewritten: no movement
            time.sleep(0.5)
            write_offset(zk, "ferry-mirror", "views", 0, 190)

        writer = threading.Thread(target=commit_later)
        started = time.time()
        writer.start()
        status = mirror_status(live.zk_connect, offline.zk_connect, "ferry-mirror", rate_interval_s=3.0)
        writer.join(10)
        elapsed = time.time() - started
    finally:
        zk.stop()
        zk.close()
    rows = {(p.topic, p.partition): p for p in status.partitions}
    p0, p1 = rows[("views", 0)], rows[("views", 1)]
    assert (p0.live_end, p0.committed, p0.lag) == (200, 190, 10)
    # the record before 190 is record 2*189: its age now, within the time status took
    expected = (time.time() * 1000 - (ts0 + 2 * 189 * 1000)) / 1000
    assert expected - elapsed - 1 <= p0.lag_seconds <= expected + 1, (p0.lag_seconds, expected)
    assert p1.lag == 0 and p1.lag_seconds == 0.0
    # 40 offsets between the first reading's commit (150) and the last (190), over their znodes' mtimes
    # (the first reading's was written before status began, at least 1.5 s earlier): between 0 and 40/1.5
    assert 0 < p0.messages_per_s <= 40 / 1.4, p0.messages_per_s
    assert p1.messages_per_s == 0.0  # no commit moved: the copy stands still
    doc = status.to_dict()["partitions"][0]
    assert doc["lag_seconds"] == p0.lag_seconds and doc["messages_per_s"] == p0.messages_per_s

    # the CLI: the same columns, and --rate-interval 0 leaves the rate unknown
    out = ferry("mirror", "status", "--source-zookeeper", live.zk_connect, "--target-zookeeper", offline.zk_connect,
                "--rate-interval", "0", "--json")
    assert out.returncode == 0, out.stderr
    parts = {(p["topic"], p["partition"]): p for p in json.loads(out.stdout)["partitions"]}
    assert parts[("views", 0)]["lag_seconds"] >= AGE_MS / 1000 and parts[("views", 0)]["messages_per_s"] is None
    bad = ferry("mirror", "status", "--source-zookeeper", live.zk_connect, "--target-zookeeper", offline.zk_connect,
                "--rate-interval", "-1")
    assert bad.returncode == 2 and "--rate-interval" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def ferry(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FERRY_CLIENT_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "ferry.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=60)
