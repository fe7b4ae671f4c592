"""`/metrics` of the dashboard: the judgements only the books can make, for Prometheus' alert rules.

Brokers and the mirror export their own state (``ferry_broker_*``, ``ferry_mirror_*``); whether an hour is
complete and whether a load failed are known only after reconciling the books and reading the ledger, which
the dashboard does anyway. Exporting them here keeps one decision (``ferry.audit.completeness``) behind both
the page and the alert. Collected on scrape from the cached sources.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
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
        hours = GaugeMetricFamily("ferry_audit_hour_statuses", "how many of the last 48 hours have each status",
                                  labels=["topic", "status"])
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
            yield from self._loads(loads)
        brokers = GaugeMetricFamily("ferry_cluster_brokers", "brokers registered in ZooKeeper", labels=["cluster"])
        reachable = GaugeMetricFamily("ferry_cluster_zookeeper_reachable", "1 when the cluster's ZooKeeper answered",
                                      labels=["cluster"])
        versions = GaugeMetricFamily("ferry_cluster_broker_versions", "distinct ferry versions the registered "
                                     "brokers run (more than 1: a rolling upgrade half done)", labels=["cluster"])
        for c in self.sources.clusters()["clusters"]:
            reachable.add_metric([c["zookeeper"]], 0 if c["error"] else 1)
            if not c["error"]:
                brokers.add_metric([c["zookeeper"]], len(c["brokers"]))
                versions.add_metric([c["zookeeper"]], len({b["ferry_version"] for b in c["brokers"]}))
        yield brokers
        yield versions
        yield reachable


    @staticmethod
    def _loads(loads: dict) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """The ledger's view of the loads: failed runs (a failed run notes itself in the ledger), runs that
        began and never ended (killed), the last commit."""
        now = time.time()
        yield GaugeMetricFamily("ferry_load_ledger_readable", "1 when the ledger could be read",
                                value=0 if loads["error"] else 1)
        yield CounterMetricFamily("ferry_load_failed_runs", "load runs that failed (noted in the ledger by the run)",
                                  value=loads["failed_total"])
        ended = [r for r in loads["runs"] if r.get("ended")]
        latest = max(ended, key=lambda r: r["ended"]) if ended else None
        yield GaugeMetricFamily("ferry_load_last_run_failed",
                                "1 when the latest load run that ended failed (a later commit clears it)",
                                value=1 if latest is not None and latest["result"] == "failed" else 0)
        failures = [r["ended"] for r in loads["failed"] if r.get("ended")]
        yield GaugeMetricFamily("ferry_load_last_failure_timestamp_seconds", "when the latest failed load run ended",
                                value=max(failures) if failures else 0.0)
        commits = [r["committed_at"] for r in loads["runs"] if r.get("committed_at")]
        yield GaugeMetricFamily("ferry_load_last_commit_timestamp_seconds", "when the last load run committed",
                                value=max(commits) if commits else 0.0)
        started = [r["started"] for r in loads["unfinished"] if r.get("started")]
        yield GaugeMetricFamily("ferry_load_unfinished_runs",
                                "load runs that began and neither committed nor noted a failure (running or killed)",
                                value=len(loads["unfinished"]))
        yield GaugeMetricFamily("ferry_load_oldest_unfinished_run_age_seconds",
                                "age of the oldest run that began and neither committed nor noted a failure "
                                "(killed if old)", value=max(0.0, now - min(started)) if started else 0.0)


def registry_for(sources: Sources) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BooksCollector(sources))
    return reg
