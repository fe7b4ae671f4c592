"""Prometheus metrics of one broker, read from its live objects at scrape time (Kafka's names in spirit:
UnderReplicatedPartitions, IsrShrinksPerSec, ActiveControllerCount, OfflinePartitionsCount, LogFlushRateAndTimeMs,
RequestQueueSize, MemoryPoolAvailable), with the process' own (CPU, memory, open files: prometheus_client's
ProcessCollector). The list with Kafka's JMX names beside them: docs/metrics.md.

A collector rather than gauges set from the hot paths: nothing is counted twice, and the state read here
(partitions, queues, pools) costs the hot paths nothing; what only the request path can see (request counts and
times, bytes per topic) the connections count cheaply (request_metrics.py) and this reads. Served on
``metrics.listen`` (off in a bare broker; on in the demo and the playbooks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ferry.broker.log.log_flush import LOG_FLUSH_TIME
from ferry.wire import native
from ferry.wire.bucket_histogram import add_histogram
from ferry.wire.http_security import HttpSecurity, serve_wsgi


class MetricsSource(Protocol):
    """Anything in the broker with metrics of its own (a BrokerPlugin: the embedded mirror)."""

    def collect(self) -> Iterator[Metric]: ...


class MeteredListener(Protocol):
    """A SocketServer as the metrics see it: its name, its queues and its memory pool."""

    spec: Any
    pool: Any

    def queues(self) -> tuple[int, int, int]: ...


class BrokerCollector(Collector):
    def __init__(self, broker_id: int, replicas: Any, controller: Any,
                 offline_log_dirs: Callable[[], int] = lambda: 0, requests: Any = None,
                 extra: tuple[MetricsSource, ...] = (), listeners: Callable[[], list[MeteredListener]] = list) -> None:
        """``extra``: the metrics of components embedded in the broker (the embedded mirror's links);
        ``listeners``: the socket servers (connections, request and response queues, memory pool)."""
        self.listeners = listeners
        self.broker_id = str(broker_id)
        self.extra = extra
        self.replicas = replicas
        self.controller = controller
        self.offline_log_dirs = offline_log_dirs
        self.requests = requests  # RequestMetrics: per-API counters kept by the connections

    def collect(self) -> Iterator[Any]:
        b = ["broker"]
        rm = self.replicas
        parts = list(rm.partitions.values())
        led = [p for p in parts if p.is_leader]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=b)
            g.add_metric([self.broker_id], value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=b)
            c.add_metric([self.broker_id], value)
            return c

        yield gauge("ferry_broker_partitions", "partitions with a replica on this broker", len(parts))
        yield gauge("ferry_broker_leader_partitions", "partitions this broker leads", len(led))
        yield gauge("ferry_broker_under_replicated_partitions",
                    "partitions led here whose ISR is shorter than their replica list", rm.under_replicated())
        yield gauge("ferry_broker_under_min_isr_partitions",
                    "partitions led here whose ISR is below min.insync.replicas (acks=all fails)",
                    sum(1 for p in led if len(p.isr) < p.min_isr))
        yield from rm.commit_latency.collect()
        if self.requests is not None:
            yield from self.requests.collect(self.broker_id)
        yield gauge("ferry_broker_offline_partitions",
                    "partitions with a replica here that have no leader (as this broker's metadata says)",
                    sum(1 for p in parts if p.leader < 0))
        flush = HistogramMetricFamily("ferry_log_flush_time_seconds", "time of one log flush: fsync of the "
                                      "segments, indexes, leader epochs and directory (LogFlushRateAndTimeMs)",
                                      labels=b)
        add_histogram(flush, [self.broker_id], LOG_FLUSH_TIME)
        yield flush
        yield from self._network()
        yield counter("ferry_broker_isr_shrinks", "followers removed from an ISR by this leader", rm.isr_shrinks)
        yield counter("ferry_broker_isr_expands", "followers added back to an ISR by this leader", rm.isr_expands)
        yield gauge("ferry_broker_offline_log_dirs", "log directories that cannot be written",
                    self.offline_log_dirs())
        c = self.controller
        active = bool(c is not None and c.active)
        yield gauge("ferry_controller_active", "1 on the broker that is the controller", 1 if active else 0)
        if active:
            offline = sum(1 for st, _v in c.states.states.values() if st.leader < 0)
            yield gauge("ferry_controller_offline_partitions", "partitions without a leader (cluster-wide)",
                        offline)
            yield counter("ferry_controller_leader_elections", "leader elections written by this controller",
                          c.elections)
        for collector in self.extra:
            yield from collector.collect()

    def _network(self) -> Iterator[Any]:
        """Per listener: connections, requests read and not answered (ferry handles a request as soon as it is
        read, so this is Kafka's request queue, the purgatories and the response queue together), ready answers
        not yet written; and the memory pool of each (queued.max.request.bytes)."""
        labels = ["broker", "listener"]
        fams = {
            "conn": GaugeMetricFamily("ferry_broker_connections", "open client connections", labels=labels),
            "req": GaugeMetricFamily("ferry_broker_request_queue_size",
                                     "requests read and not yet answered (RequestQueueSize)", labels=labels),
            "resp": GaugeMetricFamily("ferry_broker_response_queue_size",
                                      "answers ready and waiting to be written (ResponseQueueSize)", labels=labels),
            "avail": GaugeMetricFamily("ferry_broker_memory_pool_available_bytes",
                                       "room left for requests being received (MemoryPoolAvailable; "
                                       "queued.max.request.bytes, absent when unbounded)", labels=labels),
            "used": GaugeMetricFamily("ferry_broker_memory_pool_used_bytes",
                                      "bytes of requests being received (MemoryPoolUsed)", labels=labels),
            "wait": GaugeMetricFamily("ferry_broker_memory_pool_waiting_connections",
                                      "connections waiting for room in the memory pool", labels=labels),
        }
        for server in self.listeners():
            lab = [self.broker_id, server.spec.name]
            conns, unanswered, ready = server.queues()
            fams["conn"].add_metric(lab, conns)
            fams["req"].add_metric(lab, unanswered)
            fams["resp"].add_metric(lab, ready)
            pool = server.pool
            if pool.bounded:
                fams["avail"].add_metric(lab, pool.available)
                fams["used"].add_metric(lab, pool.capacity - pool.available)
            fams["wait"].add_metric(lab, pool.waiting)
        yield from fams.values()


def serve(port: int, collector: BrokerCollector, host: str = "127.0.0.1",
          security: HttpSecurity | None = None) -> CollectorRegistry:
    """Expose /metrics on ``host:port`` (HTTPS and authentication as ``security`` says); returns the registry
    (tests read it directly)."""
    registry = CollectorRegistry()
    registry.register(collector)
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, process_resident_memory_bytes, open fds
    native.register_metrics(registry)  # ferry_native_enabled{part}
    serve_wsgi(make_wsgi_app(registry), host, port, security or HttpSecurity())
    return registry
