"""The dashboard's JSON endpoints through FastAPI's TestClient over a real pipeline (ZooKeeper, a live and
an offline broker, the mirror, audit counts, real `ferry load` runs — one committed, one failed — and their
ledger): the same books as `ferry audit report`, the failed run with its error, bad input answered 400/404,
and unreachable clusters reported on the page instead of failing it."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from ferry.client.audit.bucket import HOUR_MS, hour_start
from ferry.dashboard.app import create_app
from ferry.dashboard.sources import NoLiveClusterError, Sources
from tests.dashboard.pipeline import BROKEN, TOPIC, start_pipeline
from tests.mirror.mirror_harness import wait_for

pytestmark = pytest.mark.slow


def test_endpoints_over_a_real_pipeline(cluster_factory, tmp_path):
    pipe = start_pipeline(cluster_factory, tmp_path)
    try:
        _kafka_group_reads(pipe.live_bootstrap, "analysts", 10)
        sources = Sources(pipe.offline_zk, [pipe.live_zk], str(pipe.state_dir), timeout_s=5, ttl_s=0)
        client = TestClient(create_app(sources))

        grid = client.get("/api/completeness").json()
        assert grid["error"] is None and grid["unreachable"] == []
        assert len(grid["hours"]) == 48 and TOPIC in grid["topics"]
        cell = grid["cells"][TOPIC][str(pipe.past_hour)]
        assert (cell["status"], cell["produced"], cell["loaded"], cell["missing"]) == ("complete", 40, 40, 0)
        assert grid["cells"][TOPIC][str(pipe.past_hour - HOUR_MS)]["status"] == "empty"

        drill = client.get(f"/api/completeness/{TOPIC}/{pipe.past_hour}").json()
        assert drill["status"] == "complete" and len(drill["buckets"]) == 6
        first = drill["buckets"][0]
        # the mirror publishes its own counts on its own schedule: producer and warehouse decide
        assert (first["tiers"]["producer"], first["tiers"]["warehouse"]) == (40, 40)
        assert sum(first["hosts"]["producer"].values()) == 40 and sum(first["hosts"]["warehouse"].values()) == 40
        assert grid["cells"][BROKEN][str(pipe.past_hour)]["status"] == "incomplete"  # its load failed
        iso = time.strftime("%Y-%m-%dT%H", time.gmtime(pipe.past_hour / 1000))
        assert client.get(f"/api/completeness/{TOPIC}/{iso}").json()["hour_start"] == pipe.past_hour

        flow = client.get(f"/api/flow?topic={TOPIC}").json()
        assert flow["topics"][TOPIC]["producer"] == {str(pipe.past_hour): 40}
        svg = client.get(f"/plot/flow.svg?topic={TOPIC}")
        assert svg.headers["content-type"].startswith("image/svg+xml") and svg.text.count("<polyline") >= 2

        mirror = client.get("/api/mirror").json()
        (src,) = mirror["sources"]
        assert src["error"] is None and src["total_lag"] == 0
        assert {p["topic"] for p in src["partitions"]} >= {TOPIC, "_audit"}
        lag = client.get("/plot/lag.svg")  # lag per partition over the samples taken so far
        assert lag.headers["content-type"].startswith("image/svg+xml") and f"{TOPIC}/0" in lag.text

        loads = client.get("/api/loads").json()
        hour = time.strftime("%Y-%m-%d %H", time.gmtime(pipe.past_hour / 1000)) + ":00"
        failed, *older = loads["runs"]  # newest first: the failed load of `broken` came last
        assert (failed["result"], failed["stage"], failed["committed"]) == ("failed", "topics", False)
        assert failed["error"].startswith(f"BadRecordsError: {BROKEN}: no record carries a registered Avro schema id")
        assert failed["started"] <= failed["ended"] and f"{BROKEN} {hour}" in failed["hours_touched"]
        assert loads["failed"] == [failed] and loads["failed_total"] == 1
        views = [r for r in older if r["hours"].get(TOPIC)]
        assert len(views) == 1 and views[0]["result"] == "committed" and views[0]["rows"] == 40
        assert f"{TOPIC} {hour}" in views[0]["hours_touched"] and views[0]["started"] <= views[0]["ended"]
        assert all(r["result"] == "committed" for r in older)
        assert [r["run_id"][:7] for r in loads["unfinished"]] == ["killed-"]  # the failed run is not "unfinished"
        text = client.get("/metrics").text
        for line in ("ferry_load_failed_runs_total 1.0", "ferry_load_last_run_failed 1.0",
                     "ferry_load_unfinished_runs 1.0", "ferry_load_ledger_readable 1.0"):
            assert line in text, line

        clusters = client.get("/api/clusters").json()["clusters"]
        assert [c["role"] for c in clusters] == ["offline", "live"]
        for c in clusters:
            assert c["error"] is None and len(c["brokers"]) == 1 and c["under_replicated"] == 0
            views = next(t for t in c["topics"] if t["topic"] == TOPIC)
            assert [p["leader"] for p in views["partitions"]] == [c["brokers"][0]["id"]] * 2
        live_groups = {g["group"]: g for g in clusters[1]["groups"]}
        assert (live_groups["ferry-mirror"]["type"], live_groups["ferry-mirror"]["total_lag"]) == ("zookeeper", 0)
        analysts = live_groups["analysts"]
        assert analysts["type"] == "kafka" and analysts["error"] is None
        committed = [r for r in analysts["partitions"] if r["committed"] is not None]
        assert committed and analysts["total_lag"] == sum(r["log_end"] - r["committed"] for r in committed) > 0
        assert sum(r["committed"] for r in committed) == 10  # what the group read (from offset 0)

        for page in ("/", "/flow", "/loads", "/clusters"):
            r = client.get(page)
            assert r.status_code == 200 and "<script>" in r.text and "http" not in r.text.split("<script>")[1]

        # bad input: a JSON 400 / an HTML 404, never a traceback
        for url in ("/api/completeness?from=yesterday", "/api/completeness?from=2024-01-02T00&to=2024-01-01T00",
                    "/api/completeness?from=2000-01-01T00", f"/api/completeness/{TOPIC}/noon"):
            r = client.get(url)
            assert r.status_code == 400 and "error" in r.json() and "Traceback" not in r.text, url
        r = client.get(f"/api/completeness/no-such-topic/{pipe.past_hour}")
        assert r.status_code == 404 and "no-such-topic" in r.json()["error"]
        r = client.get("/no/such/page")
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")

        # the mirror stops, more is produced live: the current hour turns incomplete (live counts decide)
        pipe.mirror.stop()
        now_hour = hour_start(int(time.time() * 1000))
        pipe.produce(7, now_hour)
        wait_for(lambda: client.get("/api/completeness").json()["cells"][TOPIC][str(now_hour)]["status"]
                 == "incomplete", 30, "the current hour to turn incomplete")
        cell = client.get("/api/completeness").json()["cells"][TOPIC][str(now_hour)]
        assert (cell["produced"], cell["missing"], cell["colour"]) == (7, 7, "incomplete")
        assert client.get("/api/completeness").json()["completeness"] == "live" and cell["completeness"] == "live"

        # started --offline-only, the same books come from the offline counts alone: the hour the stopped mirror
        # holds back looks empty, not incomplete, and every answer says what it was judged from
        alone = TestClient(create_app(Sources(pipe.offline_zk, [], str(pipe.state_dir), offline_only=True,
                                              timeout_s=5, ttl_s=0)))
        grid = alone.get("/api/completeness").json()
        assert grid["completeness"] == "offline-only" and grid["unreachable"] == []
        cells = grid["cells"][TOPIC]
        assert (cells[str(pipe.past_hour)]["status"], cells[str(pipe.past_hour)]["completeness"]) == \
            ("complete", "offline-only")
        assert cells[str(now_hour)]["status"] == "empty"
        assert alone.get(f"/api/completeness/{TOPIC}/{pipe.past_hour}").json()["completeness"] == "offline-only"
        with pytest.raises(NoLiveClusterError, match="--offline-only"):
            Sources(pipe.offline_zk, [], str(pipe.state_dir))  # neither: refused, never judged offline silently

        # the same judgements for Prometheus' alert rules (infra/ansible/prometheus)
        text = client.get("/metrics").text
        assert 'ferry_audit_hour_statuses{status="incomplete",topic="views"} 1.0' in text
        assert 'ferry_audit_hour_statuses{status="complete",topic="views"} 1.0' in text
        assert "ferry_audit_books_readable 1.0" in text
        assert f'ferry_cluster_brokers{{cluster="{pipe.live_zk}"}} 1.0' in text

        # the offline broker goes down: the page says so, the app keeps serving
        pipe.offline_cluster.stop()
        t0 = time.monotonic()
        grid = client.get("/api/completeness")
        assert grid.status_code == 200 and grid.json()["error"] and time.monotonic() - t0 < 30
        offline = client.get("/api/clusters").json()["clusters"][0]
        assert offline["brokers"] == [] and offline["offline_partitions"] >= 2
        assert client.get("/").status_code == 200 and "ferry_audit_books_readable 0.0" in client.get("/metrics").text
    finally:
        pipe.mirror.stop()


def _kafka_group_reads(bootstrap: str, group: str, n: int) -> None:
    """A Kafka-protocol group (librdkafka) that read and committed ``n`` messages of the topic."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([TOPIC])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += [m for m in c.consume(n - len(got), 1.0) if m.error() is None]
        assert len(got) == n
        c.commit(asynchronous=False)
    finally:
        c.close()


def test_unreachable_clusters_are_shown_not_fatal(tmp_path):
    """Nothing listens on port 1: every source answers with its error and the hours are unknown."""
    sources = Sources("127.0.0.1:1/offline", ["127.0.0.1:1/live"], str(tmp_path / "none"), timeout_s=1, ttl_s=0)
    client = TestClient(create_app(sources))
    grid = client.get("/api/completeness?from=2024-05-01T10&to=2024-05-01T12")
    assert grid.status_code == 200
    doc = grid.json()
    assert doc["error"] and doc["unreachable"] == ["127.0.0.1:1/live"] and doc["hours"] == [
        1714557600000, 1714561200000]
    clusters = client.get("/api/clusters").json()["clusters"]
    assert all(c["error"] for c in clusters)
    mirror = client.get("/api/mirror").json()
    assert mirror["sources"][0]["error"] and mirror["links"] == [] and "127.0.0.1:1/offline" in mirror["links_error"]
    assert client.get("/api/loads").json()["runs"] == []
    assert client.get("/").status_code == 200
    text = client.get("/metrics").text
    assert "ferry_audit_books_readable 0.0" in text and 'ferry_cluster_zookeeper_reachable{cluster="127.0.0.1:1/live"} 0.0' in text
