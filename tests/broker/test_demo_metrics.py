"""`ferry demo`'s brokers serve /metrics by default and the demo prints where: its cluster (ZooKeeper, the live
and offline brokers) started for real, each printed address scraped."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ferry.demo_steps import LIVE_BROKERS, OFFLINE_BROKERS, DemoCluster, DemoProgress


def _scrape(url: str) -> str:
    """/metrics of a broker that may still be starting (its HTTP server comes up once it has registered)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return urllib.request.urlopen(url, timeout=10).read().decode()
        except urllib.error.URLError:
            assert time.monotonic() < deadline, f"{url} did not answer within 30 s"
            time.sleep(0.2)


@pytest.mark.slow  # ZooKeeper and three broker processes
def test_demo_brokers_serve_metrics_where_the_demo_says(tmp_path, capsys):
    root = tmp_path / "demo"
    root.mkdir()
    # a directory of a run from before the brokers had metrics: its ports are kept, the metrics ports added
    old = {"zookeeper": 0, "live-1": 0}
    (root / "ports.json").write_text(json.dumps(old))
    cluster = DemoCluster(root, DemoProgress())
    ports = cluster._ports()
    assert ports["zookeeper"] == 0 and ports["metrics-live-1"] > 0
    (root / "ports.json").unlink()

    with DemoCluster(root, DemoProgress()) as cluster:
        cluster.start()
        printed = capsys.readouterr().out
        urls = re.findall(r"broker \d+ on \S+ \(metrics on (http://127\.0\.0\.1:\d+/metrics)\)", printed)
        assert len(urls) == LIVE_BROKERS + OFFLINE_BROKERS, printed
        for url in urls:
            text = _scrape(url)
            families = {fam.name for fam in text_string_to_metric_families(text)}
            assert {"ferry_broker_partitions", "ferry_request_total_time_seconds", "ferry_broker_topic_bytes_in",
                    "process_resident_memory_bytes"} <= families, url
