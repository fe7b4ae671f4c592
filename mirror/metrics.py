"""Prometheus metrics of one mirror process (its own registry, served on 127.0.0.1).

Lag is "live end offset minus committed offset" per partition, the number an operator alarms on; the
data-lost counter is the one that must stay at zero (it moves only when the live cluster deleted data
the mirror had not copied yet).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app

from ferry.wire import native
from ferry.wire.http_security import HttpSecurity, serve_wsgi


class MirrorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.lag = Gauge("ferry_mirror_lag_messages", "live end offset minus committed offset",
                         ["topic", "partition"], registry=r)
        self.committed = Gauge("ferry_mirror_committed_offset", "last offset committed to the live ZooKeeper",
                               ["topic", "partition"], registry=r)
        self.messages = Counter("ferry_mirror_messages", "messages acknowledged by the offline cluster",
                                ["topic"], registry=r)
        self.bytes = Counter("ferry_mirror_bytes", "record batch bytes acknowledged by the offline cluster",
                             ["topic"], registry=r)
        self.errors = Counter("ferry_mirror_errors", "failed fetches, produces and commits (all retried)",
                              ["kind"], registry=r)
        self.last_error = Gauge("ferry_mirror_last_error_timestamp_seconds", "time of the last error",
                                registry=r)
        self.data_lost = Counter("ferry_mirror_data_lost_messages",
                                 "messages deleted from the live cluster (retention) before they were mirrored",
                                 ["topic"], registry=r)
        self.offset_resets = Counter("ferry_mirror_offset_resets",
                                     "committed offsets outside the live log, restarted from its start",
                                     ["topic"], registry=r)
        self.syncs = Counter("ferry_mirror_syncs", "partitions synced from the offline log's tail: on taking "
                             "them over (takeover), or after the offline broker refused a sequence another "
                             "writer had used first (refused_sequence)", ["kind"], registry=r)
        self.owned = Gauge("ferry_mirror_owned_partitions", "live partitions this process owns", registry=r)
        self.rounds_in_flight = Gauge("ferry_mirror_produce_rounds_in_flight", "rounds of a stream whose produce "
                                      "requests await the offline cluster's answers (the pipelining depth)",
                                      ["stream"], registry=r)
        self.overlapped_rounds = Counter("ferry_mirror_overlapped_rounds", "rounds that fetched from the live "
                                         "cluster while produce requests of earlier rounds awaited their answers",
                                         registry=r)
        self.rebalances = Counter("ferry_mirror_rebalances", "ownership changes seen", registry=r)

    def error(self, kind: str) -> None:
        self.errors.labels(kind).inc()
        self.last_error.set(time.time())

    def forget_partition(self, topic: str, partition: int) -> None:
        for g in (self.lag, self.committed):
            try:
                g.remove(topic, str(partition))
            except KeyError:
                pass

    def serve(self, port: int, host: str = "127.0.0.1", security: HttpSecurity | None = None) -> None:
        """Expose /metrics on ``host:port`` (loopback by default; HTTPS and authentication as ``security``
        says)."""
        native.register_metrics(self.registry)  # ferry_native_enabled{part}
        serve_wsgi(make_wsgi_app(self.registry), host, port, security or HttpSecurity())
