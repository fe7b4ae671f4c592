"""`ferry audit report` against a real cluster: producer counts published by the Producer, a warehouse
count published like a loader would, the books read back from `_audit`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry.client.audit.bucket import BUCKET_MS, HOUR_MS, bucket_start, hour_start
from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent
from ferry.client.producer import Producer
from ferry.zk import ClusterRegistry

ROOT = Path(__file__).resolve().parents[2]


def ferry(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FERRY_ZOOKEEPER", None)
    return subprocess.run([sys.executable, "-m", "ferry.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=60)


def _ensure_audit_topic(reg: ClusterRegistry) -> None:
    """Brokers create `_audit` at start-up; it may not be there yet when the test starts."""
    from ferry.zk.errors import TopicExistsError

    try:
        reg.create_topic(AUDIT_TOPIC, 1)
    except TopicExistsError:
        pass


def test_report_balances_the_books(cluster_factory):
    cluster = cluster_factory(n_brokers=1, datacenter="offline")
    reg = ClusterRegistry(cluster.zk_connect).start()
    try:
        _ensure_audit_topic(reg)
        reg.create_topic("views", 2)
        reg.create_topic("clicks", 1)
    finally:
        reg.stop()
    now = int(time.time() * 1000)
    hour = hour_start(now)
    b0 = hour  # first bucket of the current hour: loaded in full
    b1 = hour + BUCKET_MS  # second bucket: 3 messages short in the warehouse
    with Producer(zookeeper=cluster.zk_connect, application="web") as p:
        for i in range(30):
            p.send("views", b"v", timestamp_ms=b0 + i)
        for i in range(20):
            p.send("views", b"v", timestamp_ms=b1 + i)
        for i in range(5):
            p.send("clicks", b"c", timestamp_ms=b0 + i)
        # the warehouse tier, as a loader publishes it
        for topic, bucket, n in (("views", b0, 30), ("views", b1, 17), ("clicks", b0, 5)):
            e = AuditEvent.new(topic, "warehouse", bucket, n, host="loader", datacenter="offline",
                               application="ferry-load", time_ms=now)
            p.send(AUDIT_TOPIC, e.to_json(), topic.encode())
            if topic == "clicks":
                p.send(AUDIT_TOPIC, e.to_json(), topic.encode())  # a re-published copy: counted once
    r = ferry("audit", "report", "--zookeeper", cluster.zk_connect, "--offline-only", "--format", "json",
              "--hours", "1")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["completeness"] == "offline-only"
    assert {h["completeness"] for h in doc["hours"]} == {"offline-only"}  # every hour carries the mark
    books = {h["topic"]: h for h in doc["hours"]}
    assert set(books) == {"views", "clicks"}
    v, c = books["views"], books["clicks"]
    assert (v["produced"], v["loaded"], v["missing"], v["duplicates"], v["complete"]) == (50, 47, 3, 0, False)
    assert (c["produced"], c["loaded"], c["missing"], c["complete"]) == (5, 5, 0, True)
    assert doc["duplicate_events"] == 1
    assert bucket_start(b1) == b1 and hour_start(b1) == hour and HOUR_MS > BUCKET_MS

    r = ferry("audit", "report", "--zookeeper", cluster.zk_connect, "--offline-only", "--topic", "views",
              "--fail-incomplete")
    assert r.returncode == 1
    header, row, said = r.stdout.splitlines()
    assert said.startswith("completeness: offline-only")
    assert header.split() == ["topic", "hour", "(UTC)", "produced", "mirrored", "loaded", "missing", "duplicates",
                              "complete"]
    assert row.split()[3:] == ["50", "0", "47", "3", "0", "no"]


def test_report_errors_are_clear():
    r = ferry("audit", "report")
    assert r.returncode == 2 and "--zookeeper" in r.stderr
    r = ferry("audit", "report", "--zookeeper", "127.0.0.1:1/x", "--hours", "-1")
    assert r.returncode == 2 and "--hours" in r.stderr
    # completeness from the live counts is the only default: no live cluster named is refused, not guessed
    r = ferry("audit", "report", "--zookeeper", "127.0.0.1:1/x")
    assert r.returncode == 2 and "--live-zookeeper" in r.stderr and "--offline-only" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_a_mirror_that_never_ran_shows_missing_with_the_live_cluster_read_too(cluster_factory):
    """Producers in the live cluster, no mirror at all: read alone, the offline `_audit` has no events for
    the hour; with --live-zookeeper the producers' counts appear and the hour is incomplete (missing 15).
    A producer event that also reached the offline cluster counts once."""
    live = cluster_factory(n_brokers=1, datacenter="live")
    offline = cluster_factory(n_brokers=1, datacenter="offline")
    for c in (live, offline):
        reg = ClusterRegistry(c.zk_connect).start()
        try:
            _ensure_audit_topic(reg)
            reg.create_topic("views", 1)
        finally:
            reg.stop()
    now = int(time.time() * 1000)
    t0 = hour_start(now) + 1000  # all in the current hour
    with Producer(zookeeper=live.zk_connect, application="web") as p:
        for i in range(12):
            p.send("views", b"v", timestamp_ms=t0 + i)
    copied = AuditEvent.new("views", "producer", bucket_start(t0), 3, host="web-9", datacenter="live",
                            application="web", time_ms=now)
    for c in (live, offline):  # as if the mirror had copied this one event before it stopped
        with Producer(zookeeper=c.zk_connect, application="web", audit=False) as p:
            p.send(AUDIT_TOPIC, copied.to_json(), b"views")
    alone = ferry("audit", "report", "--zookeeper", offline.zk_connect, "--offline-only", "--format", "json",
                  "--hours", "1")
    assert alone.returncode == 0, alone.stderr
    assert [(h["produced"], h["loaded"], h["completeness"]) for h in json.loads(alone.stdout)["hours"]] == \
        [(3, 0, "offline-only")]
    both = ferry("audit", "report", "--zookeeper", offline.zk_connect, "--live-zookeeper", live.zk_connect,
                 "--format", "json", "--hours", "1", "--fail-incomplete")
    assert both.returncode == 1, both.stderr
    doc = json.loads(both.stdout)
    (h,) = doc["hours"]
    assert (h["topic"], h["produced"], h["mirrored"], h["missing"], h["complete"]) == ("views", 15, 0, 15, False)
    assert doc["duplicate_events"] == 1
    assert h["status"] == "incomplete" and doc["unreachable"] == [] and h["completeness"] == "live"

    # the live cluster unreachable (its broker gone): the hour is unknown, never complete
    for b in live.brokers.values():
        b.stop()
    cut = ferry("audit", "report", "--zookeeper", offline.zk_connect, "--live-zookeeper", live.zk_connect,
                "--format", "json", "--hours", "1", "--fail-incomplete", "--timeout-s", "5")
    assert cut.returncode == 1, cut.stderr
    assert f"live cluster {live.zk_connect} are unreachable" in cut.stderr and "Traceback" not in cut.stderr
    doc = json.loads(cut.stdout)
    assert [(h["status"], h["complete"]) for h in doc["hours"]] == [("unknown", False)]
    assert doc["unreachable"] == [live.zk_connect]
