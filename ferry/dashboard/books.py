"""The books as the dashboard draws them: the completeness grid, one hour's drill-down and the flow per
tier, each computed from one :class:`AuditSnapshot`.

The completeness of an hour is decided by :mod:`ferry.audit.completeness` (``books``/``status_of``), exactly
as `ferry audit report` and the DAGs decide it; the counts per bucket come from
:func:`ferry.audit.reconciler.reconcile`. Nothing here re-implements a rule: it only lays the answers out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ferry.audit.completeness import LIVE, OFFLINE_ONLY, books, hour_label, status_of
from ferry.audit.reconciler import reconcile
from ferry.client.audit.bucket import BUCKET_MS, HOUR_MS, hour_start
from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent


@dataclass
class AuditSnapshot:
    """Every audit event known (offline `_audit` merged with the live clusters' producer counts)."""
    events: list[AuditEvent] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)  # live clusters whose producer counts are unknown
    error: str | None = None  # the offline cluster's `_audit` could not be read
    read_at: float = 0.0
    completeness: str = LIVE  # offline-only: no live cluster's counts were asked for (said on every answer)

    def health(self) -> dict[str, Any]:
        """What every books answer carries, so a page can say what it could not read and what it judged from."""
        return {"error": self.error, "unreachable": self.unreachable, "read_at": self.read_at,
                "completeness": self.completeness}


def colour_of(status: str, duplicates: int, missing: int) -> str:
    """The grid's colour class: duplicates are told apart from plain losses (they need another fix)."""
    if status == "incomplete" and duplicates and not missing:
        return "duplicates"
    return status


def grid(snap: AuditSnapshot, since_ms: int, until_ms: int) -> dict[str, Any]:
    """Topic x hour statuses over [since_ms, until_ms) (hour starts), decided by ``completeness.books``."""
    hours_ms = list(range(hour_start(since_ms), until_ms, HOUR_MS))
    topics = sorted({e.topic for e in snap.events if e.topic != AUDIT_TOPIC})
    rows = books(snap.events, topics, [hour_label(h) for h in hours_ms], unreachable=snap.unreachable,
                 offline_only=snap.completeness == OFFLINE_ONLY)
    cells: dict[str, dict[str, Any]] = defaultdict(dict)
    for r in rows:
        d = r.to_dict()
        d["hour_start"] = r.hour_ms
        d["colour"] = colour_of(r.status, r.duplicates, r.missing)
        cells[r.topic][str(r.hour_ms)] = d
    return {"from": hours_ms[0] if hours_ms else since_ms, "to": until_ms, "hours": hours_ms,
            "topics": topics, "cells": cells, **snap.health()}


def _per_host(snap: AuditSnapshot, topic: str, hour_ms: int) -> dict[tuple[int, str, str], int]:
    """{(bucket start, tier, host): count} of one topic's hour: each event once (by guid), as the reconciler
    counts. A host that runs several producing applications (the demo's simulated frontends on one
    machine) is broken down as "host/application", else it is named alone."""
    counted: dict[tuple[int, str, str, str], int] = defaultdict(int)
    seen: set[str] = set()
    for e in snap.events:
        if e.guid in seen or e.topic != topic or not hour_ms <= e.bucket_start < hour_ms + HOUR_MS:
            continue
        seen.add(e.guid)
        counted[(e.bucket_start, e.tier, e.host or "?", e.application or "")] += e.count
    apps: dict[tuple[str, str], set[str]] = defaultdict(set)
    for _, tier, host, app in counted:
        apps[(tier, host)].add(app)
    hosts: dict[tuple[int, str, str], int] = defaultdict(int)
    for (bs, tier, host, app), n in counted.items():
        hosts[(bs, tier, f"{host}/{app}" if len(apps[(tier, host)]) > 1 else host)] += n
    return hosts


def cell(snap: AuditSnapshot, topic: str, hour_ms: int) -> dict[str, Any] | None:
    """One hour's 10-minute buckets per tier and per producing host; None when the topic is unknown."""
    if not any(e.topic == topic for e in snap.events):
        return None
    report = reconcile(snap.events, topic=topic, since_ms=hour_ms, until_ms=hour_ms + HOUR_MS)
    hb = report.hour(topic, hour_ms)
    status = status_of(hb, snap.unreachable)
    by_bucket = {b.bucket_start: b for b in (hb.buckets if hb else [])}
    hosts = _per_host(snap, topic, hour_ms)
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
            "buckets": buckets, **snap.health()}


def flow(snap: AuditSnapshot, topic: str | None, since_ms: int, until_ms: int) -> dict[str, Any]:
    """Counts per tier per 10-minute bucket of event time, per topic: a gap between lines is a lag."""
    report = reconcile(snap.events, topic=topic, since_ms=since_ms, until_ms=until_ms)
    series: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for h in report.hours:
        if h.topic == AUDIT_TOPIC:
            continue
        for b in h.buckets:
            for tier, n in b.tiers.items():
                series[h.topic][tier][str(b.bucket_start)] = n
    return {"from": since_ms, "to": until_ms, "bucket_ms": BUCKET_MS,
            "topics": {t: dict(s) for t, s in sorted(series.items())}, **snap.health()}
