"""What the dashboard shows, read from the same places and with the same code as the console commands.

The completeness of an hour is decided by :mod:`ferry.audit.completeness` (``books``/``status_of``), exactly
as `ferry audit report` and the DAGs decide it; mirror lag comes from :func:`ferry.mirror.status.mirror_status`
(`ferry mirror status`); topics and groups from the helpers behind `ferry topics describe` and `ferry groups
describe`; loads from the ledger (:class:`ferry.loaders.ledger.Ledger`). Nothing here re-implements a rule.

Every read can fail (ZooKeeper or a broker down): a source then answers with an ``error`` string instead
of raising, so the pages say what is unreachable and the app keeps serving.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ferry.client.audit.bucket import BUCKET_MS, HOUR_MS, hour_start
from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent

T = TypeVar("T")
MIRROR_GROUP = "ferry-mirror"


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300]


@dataclass
class AuditSnapshot:
    """Every audit event known (offline `_audit` merged with the live clusters' producer counts)."""
    events: list[AuditEvent] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)  # live clusters whose producer counts are unknown
    error: str | None = None  # the offline cluster's `_audit` could not be read
    read_at: float = 0.0


class Sources:
    """The dashboard's reads, each cached for ``ttl_s`` so that several pages polling at once cost one read."""

    def __init__(self, zookeeper: str, live_zookeepers: list[str] | None = None, state_dir: str | None = None,
                 *, timeout_s: float = 5.0, ttl_s: float = 2.0, mirror_group: str = MIRROR_GROUP) -> None:
        self.zookeeper = zookeeper
        self.live_zookeepers = list(live_zookeepers or [])
        self.state_dir = state_dir
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self.mirror_group = mirror_group
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Any]] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        # mirror lag over time: (time, {(live zk, topic, partition): lag}) sampled on every read
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
        from ferry.audit.live import read_live_counts
        from ferry.audit.reader import read_audit_events

        snap = AuditSnapshot(read_at=time.time())
        try:
            snap.events = list(read_audit_events(self.zookeeper, None, timeout_s=self.timeout_s).events)
        except Exception as e:  # noqa: BLE001 - shown on the page, the app keeps serving
            snap.error = f"offline cluster {self.zookeeper}: {_why(e)}"
        live = read_live_counts(self.live_zookeepers, self.timeout_s)
        snap.events.extend(live.events)
        snap.unreachable = list(live.unreachable)
        return snap

    def grid(self, since_ms: int, until_ms: int) -> dict[str, Any]:
        """Topic x hour statuses over [since_ms, until_ms) (hour starts), decided by ``completeness.books``."""
        from ferry.audit.completeness import books, hour_label

        snap = self.audit()
        hours_ms = list(range(hour_start(since_ms), until_ms, HOUR_MS))
        topics = sorted({e.topic for e in snap.events if e.topic != AUDIT_TOPIC})
        rows = books(snap.events, topics, [hour_label(h) for h in hours_ms], unreachable=snap.unreachable)
        cells: dict[str, dict[str, Any]] = defaultdict(dict)
        for r in rows:
            d = r.to_dict()
            d["hour_start"] = r.hour_ms
            d["colour"] = colour_of(r.status, r.duplicates, r.missing)
            cells[r.topic][str(r.hour_ms)] = d
        return {"from": hours_ms[0] if hours_ms else since_ms, "to": until_ms, "hours": hours_ms,
                "topics": topics, "cells": cells, **self._health(snap)}

    def cell(self, topic: str, hour_ms: int) -> dict[str, Any] | None:
        """One hour's 10-minute buckets per tier and per producing host; None when the topic is unknown."""
        from ferry.audit.completeness import status_of
        from ferry.audit.reconciler import reconcile

        snap = self.audit()
        if not any(e.topic == topic for e in snap.events):
            return None
        report = reconcile(snap.events, topic=topic, since_ms=hour_ms, until_ms=hour_ms + HOUR_MS)
        hb = report.hour(topic, hour_ms)
        status = status_of(hb, snap.unreachable)
        by_bucket = {b.bucket_start: b for b in (hb.buckets if hb else [])}
        counted: dict[tuple[int, str, str, str], int] = defaultdict(int)
        seen: set[str] = set()
        for e in snap.events:  # the per-host breakdown: each event once (by guid), as the reconciler counts
            if e.guid in seen or e.topic != topic or not hour_ms <= e.bucket_start < hour_ms + HOUR_MS:
                continue
            seen.add(e.guid)
            counted[(e.bucket_start, e.tier, e.host or "?", e.application or "")] += e.count
        # a host that runs several producing applications (the demo's simulated frontends on one machine) is
        # broken down as "host/application", else it is named alone
        apps: dict[tuple[str, str], set[str]] = defaultdict(set)
        for _, tier, host, app in counted:
            apps[(tier, host)].add(app)
        hosts: dict[tuple[int, str, str], int] = defaultdict(int)
        for (bs, tier, host, app), n in counted.items():
            hosts[(bs, tier, f"{host}/{app}" if len(apps[(tier, host)]) > 1 else host)] += n
        buckets = []
        for start in range(hour_ms, hour_ms + HOUR_MS, BUCKET_MS):
            b = by_bucket.get(start)
            per_host: dict[str, dict[str, int]] = defaultdict(dict)
            for (bs, tier, host), n in sorted(hosts.items()):
                if bs == start:
                    per_host[tier][host] = n
            buckets.append({"bucket_start": start, "tiers": dict(sorted(b.tiers.items())) if b else {},
                            "missing": b.missing if b else 0, "duplicates": b.duplicates if b else 0,
                            "hosts": dict(per_host)})
        totals = hb.to_dict() if hb else {"produced": 0, "mirrored": 0, "loaded": 0, "missing": 0,
                                          "duplicates": 0, "tiers": {}}
        return {"topic": topic, "hour_start": hour_ms, "status": status,
                "colour": colour_of(status, totals["duplicates"], totals["missing"]),
                **{k: totals[k] for k in ("produced", "mirrored", "loaded", "missing", "duplicates", "tiers")},
                "buckets": buckets, **self._health(snap)}

    def flow(self, topic: str | None, since_ms: int, until_ms: int) -> dict[str, Any]:
        """Counts per tier per 10-minute bucket of event time, per topic: a gap between lines is a lag."""
        from ferry.audit.reconciler import reconcile

        snap = self.audit()
        report = reconcile(snap.events, topic=topic, since_ms=since_ms, until_ms=until_ms)
        series: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
        for h in report.hours:
            if h.topic == AUDIT_TOPIC:
                continue
            for b in h.buckets:
                for tier, n in b.tiers.items():
                    series[h.topic][tier][str(b.bucket_start)] = n
        return {"from": since_ms, "to": until_ms, "bucket_ms": BUCKET_MS,
                "topics": {t: dict(s) for t, s in sorted(series.items())}, **self._health(snap)}

    @staticmethod
    def _health(snap: AuditSnapshot) -> dict[str, Any]:
        return {"error": snap.error, "unreachable": snap.unreachable, "read_at": snap.read_at}

    # ---- mirror
    def mirror(self) -> dict[str, Any]:
        return self._cached("mirror", self._read_mirror)

    def _read_mirror(self) -> dict[str, Any]:
        from ferry.mirror.status import mirror_status

        out: dict[str, Any] = {"group": self.mirror_group, "sources": []}
        sample: dict[str, int] = {}
        for live in self.live_zookeepers:
            try:
                st = mirror_status(live, self.zookeeper, self.mirror_group)
            except Exception as e:  # noqa: BLE001 - shown on the page
                out["sources"].append({"live_zookeeper": live, "error": _why(e)})
                continue
            doc = st.to_dict()
            doc["live_zookeeper"] = live
            doc["error"] = None
            out["sources"].append(doc)
            for p in st.partitions:
                if p.lag is not None:
                    sample[f"{live} {p.topic}/{p.partition}"] = p.lag
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
        """The ledger's runs, newest first: committed ones and failed ones (with their error); runs that
        began and neither committed nor noted a failure (running, or killed); data skipped as lost."""
        from ferry.loaders.ledger import Ledger

        empty = {"runs": [], "failed": [], "unfinished": [], "lost": [], "failed_total": 0, "pending": 0,
                 "published": {}}
        if not self.state_dir:
            return {"state_dir": None, "error": "no --state-dir given: the loads' ledger is not shown", **empty}
        try:
            state = Ledger(self.state_dir).read()
        except Exception as e:  # noqa: BLE001 - a torn or foreign ledger is shown, not fatal
            return {"state_dir": self.state_dir, "error": _why(e), **empty}
        committed = [{"run_id": r.get("run_id"), "started": r.get("started"), "ended": r.get("committed_at"),
                      "committed_at": r.get("committed_at"), "rows": r.get("rows"), "ranges": r.get("ranges"),
                      "partitions": r.get("partitions"), "hours": r.get("hours", {}),
                      "hours_touched": _hours_touched(r.get("hours")), "result": "committed", "error": None}
                     for r in state.get("history", [])]
        failed = [{"run_id": f.get("run_id"), "started": f.get("started"), "ended": f.get("ended"),
                   "committed_at": None, "rows": 0, "ranges": None, "partitions": None, "hours": f.get("hours", {}),
                   "hours_touched": _hours_touched(f.get("hours")), "result": "failed", "error": f.get("error"),
                   "stage": f.get("stage"), "topics": f.get("topics", []), "messages": f.get("messages"),
                   "committed": bool(f.get("committed"))}
                  for f in state.get("failed", [])]
        runs = sorted(committed + failed, key=lambda r: r.get("ended") or r.get("started") or 0, reverse=True)
        noted = {f["run_id"] for f in failed}
        # began, never committed, no failure noted: still running, or killed before it could say why
        unfinished = [{"run_id": k, "started": v.get("started"), "roots": v.get("roots", []),
                       "result": "running, or killed (never committed, no error noted)"}
                      for k, v in sorted(state.get("in_flight", {}).items()) if k not in noted]
        return {"state_dir": self.state_dir, "error": None, "runs": runs,
                "failed": [r for r in runs if r["result"] == "failed"], "unfinished": unfinished,
                "failed_total": int(state.get("failed_total", len(failed))), "lost": state.get("lost", []),
                "pending": len(state.get("pending", [])), "published": state.get("published", {})}

    # ---- clusters
    def clusters(self) -> dict[str, Any]:
        return self._cached("clusters", self._read_clusters)

    def _read_clusters(self) -> dict[str, Any]:
        out = [self._cluster("offline", self.zookeeper)]
        out += [self._cluster("live", z) for z in self.live_zookeepers]
        return {"clusters": out}

    def _cluster(self, role: str, zk_connect: str) -> dict[str, Any]:
        from ferry.client.tools.topics_cmd import _describe_topic
        from ferry.zk import ClusterRegistry

        doc: dict[str, Any] = {"role": role, "zookeeper": zk_connect, "error": None, "brokers": [], "topics": [],
                               "groups": []}
        try:
            reg = ClusterRegistry(zk_connect, timeout=self.timeout_s, create=False).start()
        except Exception as e:  # noqa: BLE001
            doc["error"] = f"ZooKeeper unreachable: {_why(e)}"
            return doc
        try:
            brokers = reg.brokers()
            doc["brokers"] = [{"id": b.id, "address": b.address, "datacenter": b.datacenter}
                              for b in sorted(brokers.values(), key=lambda b: b.id)]
            for name, info in sorted(reg.topics().items()):
                try:
                    doc["topics"].append(_describe_topic(info, reg.partition_states(name), brokers))
                except Exception:  # noqa: BLE001 - deleted since listed
                    continue
            doc["under_replicated"] = sum(p["under_replicated"] for t in doc["topics"] for p in t["partitions"])
            doc["offline_partitions"] = sum(not p["alive"] for t in doc["topics"] for p in t["partitions"])
            doc["groups"] = self._groups(reg.client, zk_connect)
        except Exception as e:  # noqa: BLE001
            doc["error"] = _why(e)
        finally:
            reg.stop()
        return doc

    def _groups(self, zk: Any, zk_connect: str) -> list[dict[str, Any]]:
        """Consumer groups with lag, through the code of `ferry groups describe` (ZooKeeper groups)."""
        from types import SimpleNamespace

        from ferry.client.group_store import list_groups
        from ferry.client.tools import kafka_groups_cmd
        from ferry.client.tools.groups_cmd import _log_ends, _partitions, _zk_describe_doc

        def kafka_doc(g: str) -> dict[str, Any]:
            return kafka_groups_cmd.describe_doc(zk, g, lambda t: _partitions(zk, t),
                                                 lambda t, ps: _log_ends(zk_connect, t, ps))

        wanted: list[tuple[str, str]] = [(g, "zookeeper") for g in list_groups(zk)]
        try:  # the brokers' (Kafka-protocol) groups, as `ferry groups describe --type kafka` shows them
            wanted += [(g, "kafka") for g in kafka_groups_cmd.list_groups(zk)]
        except Exception as e:  # noqa: BLE001 - the ZooKeeper groups are still worth showing
            wanted.append(("(Kafka-protocol groups)", f"unreadable: {_why(e)}"))
        out = []
        for g, kind in sorted(wanted):
            try:
                if kind.startswith("unreadable"):
                    raise RuntimeError(kind)
                d = (_zk_describe_doc(zk, SimpleNamespace(group=g, zookeeper=zk_connect)) if kind == "zookeeper"
                     else kafka_doc(g))
            except Exception as e:  # noqa: BLE001
                out.append({"group": g, "type": kind, "error": _why(e), "members": [], "partitions": [],
                            "total_lag": None})
                continue
            d["type"] = kind
            d["total_lag"] = sum(r["lag"] for r in d["partitions"] if r["lag"] is not None)
            d["error"] = None
            out.append(d)
        return out


def _hours_touched(hours: Any) -> list[str]:
    """``{table: [[dt, hr], ...]}`` of a ledger run as "table YYYY-MM-DD HH:00" (other shapes as they are)."""
    if not isinstance(hours, dict):
        return []
    out = []
    for table, got in sorted(hours.items()):
        items = got if isinstance(got, list) else list(got) if isinstance(got, dict) else [got]
        for h in items:
            out.append(f"{table} {h[0]} {h[1]}:00" if isinstance(h, list | tuple) and len(h) == 2 else f"{table} {h}")
    return out


def colour_of(status: str, duplicates: int, missing: int) -> str:
    """The grid's colour class: duplicates are told apart from plain losses (they need another fix)."""
    if status == "incomplete" and duplicates and not missing:
        return "duplicates"
    return status
