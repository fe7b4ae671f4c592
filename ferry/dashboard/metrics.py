"""`/metrics` of the dashboard: the judgements only the books can make, for Prometheus' alert rules.

Brokers and the mirror export their own state (``ferry_broker_*``, ``ferry_mirror_*``); whether an hour is
complete and whether a load failed are known only after reconciling the books and reading the ledger, which
the dashboard does anyway. Exporting them here keeps one decision (``ferry.audit.completeness``) behind both
the page and the alert. Collected on scrape from the cached sources.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from ferry.client.audit.bucket import HOUR_MS, hour_start
from ferry.dashboard.sources import Sources

WINDOW_HOURS = 48


class BooksCollector(Collector):
    """Per topic: the age of the oldest incomplete hour; the loads' unfinished runs; clusters' brokers."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now_ms = int(time.time() * 1000)
        until = hour_start(now_ms) + HOUR_MS
        grid = self.sources.grid(until - WINDOW_HOURS * HOUR_MS, until)
        readable = GaugeMetricFamily("ferry_audit_books_readable", "1 when every cluster's audit counts were read",
                                     value=0 if grid["error"] or grid["unreachable"] else 1)
        yield readable
        age = GaugeMetricFamily(
            "ferry_audit_oldest_incomplete_hour_age_seconds",
            "seconds since the end of the oldest hour (last 48) that is not complete; 0 when all are complete "
            "or empty (an hour is judged by ferry.audit.completeness)", labels=["topic"])
        hours = GaugeMetricFamily("ferry_audit_hours", "hours of the last 48 per status", labels=["topic", "status"])
        for topic in grid["topics"]:
            cells = grid["cells"][topic]
            bad = [int(h) for h, c in cells.items() if c["status"] in ("incomplete", "unknown")]
            age.add_metric([topic], max(0.0, (now_ms - (min(bad) + HOUR_MS)) / 1000) if bad else 0.0)
            counts: dict[str, int] = {}
            for c in cells.values():
                counts[c["status"]] = counts.get(c["status"], 0) + 1
            for status, n in sorted(counts.items()):
                hours.add_metric([topic, status], n)
        yield age
        yield hours
        loads = self.sources.loads()
        if loads["state_dir"] is not None:
            started = [r["started"] for r in loads["unfinished"] if r.get("started")]
            yield GaugeMetricFamily("ferry_load_unfinished_runs", "load runs that began and never committed",
                                    value=len(loads["unfinished"]))
            yield GaugeMetricFamily("ferry_load_oldest_unfinished_run_age_seconds",
                                    "age of the oldest run that began and never committed (failed if old)",
                                    value=max(0.0, time.time() - min(started)) if started else 0.0)
            commits = [r["committed_at"] for r in loads["runs"] if r.get("committed_at")]
            yield GaugeMetricFamily("ferry_load_last_commit_timestamp_seconds", "when the last load run committed",
                                    value=max(commits) if commits else 0.0)
            yield GaugeMetricFamily("ferry_load_ledger_readable", "1 when the ledger could be read",
                                    value=0 if loads["error"] else 1)
        brokers = GaugeMetricFamily("ferry_cluster_brokers", "brokers registered in ZooKeeper", labels=["cluster"])
        reachable = GaugeMetricFamily("ferry_cluster_zookeeper_reachable", "1 when the cluster's ZooKeeper answered",
                                      labels=["cluster"])
        for c in self.sources.clusters()["clusters"]:
            reachable.add_metric([c["zookeeper"]], 0 if c["error"] else 1)
            if not c["error"]:
                brokers.add_metric([c["zookeeper"]], len(c["brokers"]))
        yield brokers
        yield reachable


def registry_for(sources: Sources) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BooksCollector(sources))
    return reg
