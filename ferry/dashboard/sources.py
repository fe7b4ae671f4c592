"""What the dashboard shows, read from the same places and with the same code as the console commands.

Completeness is laid out by :mod:`ferry.dashboard.books` (decided by :mod:`ferry.audit.completeness`, as
`ferry audit report` and the DAGs decide it); mirror lag comes from :func:`ferry.mirror.status.mirror_status`
and the embedded mirror's links from :func:`ferry.mirror.link_status.links_status` (`ferry mirror status`); topics and groups from :mod:`ferry.dashboard.clusters` (the public functions behind
`ferry topics describe` and `ferry groups describe`); loads from the ledger (:mod:`ferry.dashboard.loads`).
Nothing here re-implements a rule.

Every read can fail (ZooKeeper or a broker down): a source then answers with an ``error`` string instead
of raising, so the pages say what is unreachable and the app keeps serving.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from ferry.audit.completeness import LIVE, OFFLINE_ONLY
from ferry.audit.live import read_live_counts
from ferry.audit.reader import read_audit_events
from ferry.dashboard import books
from ferry.dashboard.books import AuditSnapshot
from ferry.dashboard.clusters import cluster_view
from ferry.dashboard.loads import loads_view
from ferry.dashboard.reasons import why
from ferry.mirror.link_status import links_status
from ferry.mirror.status import mirror_status
from ferry.wire.client_config import ClientConfig

T = TypeVar("T")
MIRROR_GROUP = "ferry-mirror"
MIRROR_RATE_INTERVAL_S = 2.0  # the mirror group's commits read twice this far apart: its rate (commit interval 1 s)


class NoLiveClusterError(ValueError):
    """The dashboard was given no live cluster and not told that offline counts alone may decide."""


def completeness_source(live_zookeepers: list[str], offline_only: bool) -> str:
    """What the grid judges from: the live producers' counts, unless offline-only is asked for explicitly (the
    counts that travel through the mirror stop with the data when it stops: a partial hour would look whole)."""
    if live_zookeepers and offline_only:
        raise NoLiveClusterError("--offline-only with --live-zookeeper")
    if not live_zookeepers and not offline_only:
        raise NoLiveClusterError("no --live-zookeeper: completeness is judged from the live producers' counts; "
                                 "name every live cluster, or pass --offline-only")
    return OFFLINE_ONLY if offline_only else LIVE


class Sources:
    """The dashboard's reads, each cached for ``ttl_s`` so that several pages polling at once cost one read."""

    def __init__(self, zookeeper: str, live_zookeepers: list[str] | None = None, state_dir: str | None = None,
                 *, offline_only: bool = False, timeout_s: float = 5.0, ttl_s: float = 2.0,
                 mirror_group: str = MIRROR_GROUP, offline_client: ClientConfig | None = None,
                 live_client: ClientConfig | None = None) -> None:
        """``offline_client``/``live_client``: TLS/SASL towards each side's brokers (nothing of them is shown)."""
        self.zookeeper = zookeeper
        self.offline_client = offline_client or ClientConfig.plaintext()
        self.live_client = live_client or ClientConfig.plaintext()
        self.live_zookeepers = list(live_zookeepers or [])
        self.completeness = completeness_source(self.live_zookeepers, offline_only)
        self.state_dir = state_dir
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self.mirror_group = mirror_group
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Any]] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        # mirror lag over time: (time, {"<live zk> <topic>/<partition>": lag}) sampled on every read
        self.lag_history: deque[tuple[float, dict[str, int]]] = deque(maxlen=720)

    def _cached(self, key: str, read: Callable[[], T]) -> T:
        # one lock per source: a slow cluster read holds back only the pages that need that source
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            hit = self._cache.get(key)
            if hit is not None and time.monotonic() - hit[0] < self.ttl_s:
                return hit[1]
            value = read()
            self._cache[key] = (time.monotonic(), value)
            return value

    # ---- audit
    def audit(self) -> AuditSnapshot:
        return self._cached("audit", self._read_audit)

    def _read_audit(self) -> AuditSnapshot:
        snap = AuditSnapshot(read_at=time.time(), completeness=self.completeness)
        try:
            snap.events = list(read_audit_events(self.zookeeper, None, timeout_s=self.timeout_s,
                                                 client_config=self.offline_client).events)
        except Exception as e:  # noqa: BLE001 - shown on the page, the app keeps serving
            snap.error = f"offline cluster {self.zookeeper}: {why(e)}"
        live = read_live_counts(self.live_zookeepers, self.timeout_s, self.live_client)
        snap.events.extend(live.events)
        snap.unreachable = list(live.unreachable)
        return snap

    def grid(self, since_ms: int, until_ms: int) -> dict[str, Any]:
        return books.grid(self.audit(), since_ms, until_ms)

    def cell(self, topic: str, hour_ms: int) -> dict[str, Any] | None:
        return books.cell(self.audit(), topic, hour_ms)

    def flow(self, topic: str | None, since_ms: int, until_ms: int) -> dict[str, Any]:
        return books.flow(self.audit(), topic, since_ms, until_ms)

    # ---- mirror
    def mirror(self) -> dict[str, Any]:
        return self._cached("mirror", self._read_mirror)

    def _read_mirror(self) -> dict[str, Any]:
        out: dict[str, Any] = {"group": self.mirror_group, "sources": []}
        sample: dict[str, int] = {}
        for live in self.live_zookeepers:
            try:
                st = mirror_status(live, self.zookeeper, self.mirror_group, source_client=self.live_client,
                                   target_client=self.offline_client, rate_interval_s=MIRROR_RATE_INTERVAL_S)
            except Exception as e:  # noqa: BLE001 - shown on the page
                out["sources"].append({"live_zookeeper": live, "error": why(e)})
                continue
            doc = st.to_dict()
            doc["live_zookeeper"] = live
            doc["error"] = None
            out["sources"].append(doc)
            for p in st.partitions:
                if p.lag is not None:
                    sample[f"{live} {p.topic}/{p.partition}"] = p.lag
        # the embedded mirror: the offline cluster's links and their partitions, as `ferry mirror status` shows them
        try:
            out["links"] = links_status(self.zookeeper, self.timeout_s)
            out["links_error"] = None
        except Exception as e:  # noqa: BLE001 - shown on the page
            out["links"], out["links_error"] = [], f"offline cluster {self.zookeeper}: {why(e)}"
        for lk in out["links"]:
            for p in lk["partitions"]:
                if p["lag"] is not None:
                    sample[f"link {lk['name']} {p['topic']}/{p['partition']}"] = p["lag"]
        self.lag_history.append((time.time(), sample))
        out["history"] = [{"time": t, "lag": s} for t, s in self.lag_history]
        return out

    def start_lag_sampler(self, interval_s: float = 15.0) -> threading.Thread:
        """Sample the mirror's lag every ``interval_s`` so the lag-over-time plot has a history even when no
        page is open (the samples live in memory: the plot starts when the dashboard starts)."""
        def loop() -> None:
            while True:
                try:
                    self.mirror()
                except Exception:  # noqa: BLE001, S110 - the next sample tries again; pages show the error
                    pass
                time.sleep(interval_s)

        t = threading.Thread(target=loop, name="ferry-dashboard-lag-sampler", daemon=True)
        t.start()
        return t

    # ---- loads
    def loads(self) -> dict[str, Any]:
        """The ledger's runs (see :func:`ferry.dashboard.loads.loads_view`); read afresh on every call."""
        return loads_view(self.state_dir)

    # ---- clusters
    def clusters(self) -> dict[str, Any]:
        return self._cached("clusters", self._read_clusters)

    def _read_clusters(self) -> dict[str, Any]:
        out = [cluster_view("offline", self.zookeeper, self.timeout_s)]
        out += [cluster_view("live", z, self.timeout_s) for z in self.live_zookeepers]
        return {"clusters": out}
