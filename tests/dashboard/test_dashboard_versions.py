"""The clusters page shows the ferry version each broker runs and marks a cluster whose brokers differ:
real ZooKeeper, two real broker processes, broker 2 running the same code installed as another release
(tests/release_label.py), read through the JSON endpoint and in a real browser (headless chromium)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from ferry.dashboard.app import create_app
from ferry.dashboard.process import start_dashboard
from ferry.dashboard.sources import Sources
from ferry.embedded import free_port
from ferry.wire import release
from tests.dashboard.test_dashboard_browser import _browser, _text
from tests.mirror.mirror_harness import wait_for
from tests.release_label import pythonpath_first, relabelled_release

OTHER = "0.1.0.post1"
UNREACHABLE_LIVE = "127.0.0.1:1/live"  # the page's live cluster: not needed here, shown as unreachable


@pytest.fixture
def mixed_cluster(cluster_factory, tmp_path, monkeypatch):
    """Broker 1 on this checkout's release, broker 2 on OTHER: a rolling upgrade half done."""
    cluster = cluster_factory(1, "offline")
    with monkeypatch.context() as m:
        m.setenv("PYTHONPATH", pythonpath_first(relabelled_release(tmp_path / "other-release", OTHER)))
        m.setenv("PYTHONSAFEPATH", "1")  # not the working directory first: a checkout's ferry.egg-info would win
        cluster.add_broker(2)
    return cluster


@pytest.mark.slow
def test_clusters_endpoint_says_each_brokers_version_and_the_mismatch(mixed_cluster) -> None:
    sources = Sources(mixed_cluster.zk_connect, [UNREACHABLE_LIVE], None, timeout_s=2, ttl_s=0)
    client = TestClient(create_app(sources))
    offline = client.get("/api/clusters").json()["clusters"][0]
    assert offline["role"] == "offline" and offline["error"] is None
    ours = release.ferry_version()
    assert [(b["id"], b["ferry_version"]) for b in offline["brokers"]] == [(1, ours), (2, OTHER)]
    assert all(b["native"].endswith(" native") and "off" not in b["native"] for b in offline["brokers"])
    assert offline["version_mismatch"] == (f"brokers run different ferry versions: {ours} on broker 1; "
                                           f"{OTHER} on broker 2")
    metric = f'ferry_cluster_broker_versions{{cluster="{mixed_cluster.zk_connect}"}}'
    assert f"{metric} 2.0" in client.get("/metrics").text  # what an alert rule watches

    # broker 2 comes back on our release: no mismatch any more
    mixed_cluster.brokers[2].stop()
    mixed_cluster.brokers[2].start()
    offline = client.get("/api/clusters").json()["clusters"][0]
    assert offline["version_mismatch"] is None
    assert {b["ferry_version"] for b in offline["brokers"]} == {ours}
    assert f"{metric} 1.0" in client.get("/metrics").text


@pytest.mark.slow
def test_clusters_page_marks_the_mismatch_in_a_real_browser(mixed_cluster, tmp_path) -> None:
    browser = _browser()
    port = free_port()
    dashboard = start_dashboard(tmp_path / "dashboard.out", mixed_cluster.zk_connect, [UNREACHABLE_LIVE], None,
                                "127.0.0.1", port)
    try:
        browser.get(f"http://127.0.0.1:{port}/clusters")
        wait_for(lambda: "brokers: 1 " in _text(browser, "clusters"), 30, "the clusters page's brokers")
        text = _text(browser, "clusters")
        assert f"(offline) ferry {release.ferry_version()} " in text and f"(offline) ferry {OTHER} " in text
        marks = browser.find_elements("css selector", "#clusters p.version-mismatch")
        assert len(marks) == 1 and marks[0].is_displayed()
        assert marks[0].text.startswith("version mismatch: brokers run different ferry versions:")
        assert "different ferry versions" in _text(browser, "banner")
        assert browser.find_element("id", "banner").is_displayed()
    finally:
        browser.quit()
        dashboard.stop()
