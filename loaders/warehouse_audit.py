"""The warehouse audit tier and the completeness table.

A load counts the rows it added per (topic, 10-minute bucket of event time) and, once the run is
committed, publishes them to `_audit` as tier ``warehouse``. The events' guids are derived from the run
id, topic and bucket, so re-publishing after a crash (the redo step) cannot double-count: the reconciler
counts each guid once. The `_audit` topic itself is loaded like any topic into ``ferry_audit``; the
books for an hour are balanced from that table (audit.reconcile) and written to ``ferry_completeness``,
one row per topic and hour, which analysts query to know which hours are complete.
"""

from __future__ import annotations

import datetime as dt
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from ferry.audit.reconciler import reconcile
from ferry.client.audit.bucket import BUCKET_MS, HOUR_MS
from ferry.client.audit.event import AUDIT_TOPIC, AuditEvent

WAREHOUSE_TIER = "warehouse"
_GUID_NAMESPACE = uuid.UUID("5f0b7c1e-2f4e-4d0a-9a35-6c1f0e0a7c11")


class AuditPublishError(RuntimeError):
    pass


def warehouse_events(run_id: str, counts: dict[tuple[str, int], int], *, datacenter: str,
                     application: str = "ferry-load", host: str | None = None) -> list[AuditEvent]:
    """One event per (topic, bucket) with a positive count; deterministic guid per run."""
    host = host or socket.gethostname()
    now = int(time.time() * 1000)
    out = []
    for (topic, bucket), n in sorted(counts.items()):
        if n <= 0 or topic == AUDIT_TOPIC:
            continue
        guid = uuid.uuid5(_GUID_NAMESPACE, f"{run_id}/{topic}/{bucket}").hex
        out.append(AuditEvent(guid, topic, WAREHOUSE_TIER, bucket, bucket + BUCKET_MS, n, host, datacenter,
                              application, now))
    return out


def publish(events: list[AuditEvent], bootstrap: str, timeout_s: float = 30.0) -> int:
    """Send the events to `_audit` and wait for every acknowledgement (raises if any is missing)."""
    if not events:
        return 0
    from ferry.client.producer import Producer

    errors: list[str] = []

    def done(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer(bootstrap=bootstrap, application="ferry-load", audit=False, linger_ms=1)
    try:
        for e in events:
            producer.send(AUDIT_TOPIC, e.to_json(), e.topic.encode(), timestamp_ms=e.time, on_delivery=done)
        left = producer.flush(timeout_s)
    finally:
        producer.close(timeout_s)
    if left or errors:
        raise AuditPublishError(f"{left} audit events unacknowledged, {len(errors)} failed "
                                f"({'; '.join(errors[:3])}); they are published again by the next run")
    return len(events)


def event_from_dict(d: dict) -> AuditEvent:
    return AuditEvent(**{f: d[f] for f in AuditEvent.__dataclass_fields__})


def hour_label(hour_ms: int) -> tuple[str, str]:
    t = dt.datetime.fromtimestamp(hour_ms / 1000, dt.UTC)
    return t.strftime("%Y-%m-%d"), t.strftime("%H")


def hour_ms_of(dt_s: str, hr_s: str) -> int:
    t = dt.datetime.strptime(f"{dt_s} {hr_s}", "%Y-%m-%d %H").replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


@dataclass
class HourStatus:
    topic: str
    dt: str
    hr: str
    produced: int
    mirrored: int
    loaded: int
    missing: int
    duplicates: int
    complete: bool
    status: str  # complete | incomplete | empty (no audit events at all for the hour)

    @property
    def hour_ms(self) -> int:
        return hour_ms_of(self.dt, self.hr)

    def label(self) -> str:
        return f"{self.topic} {self.dt} {self.hr}:00"

    def describe(self) -> str:
        return (f"{self.label()}: {self.status} (produced {self.produced}, mirrored {self.mirrored}, "
                f"loaded {self.loaded}, missing {self.missing}, duplicates {self.duplicates})")

    def to_dict(self) -> dict:
        return asdict(self)


def books(events: Iterable[AuditEvent], topics: Iterable[str], hours: Iterable[tuple[str, str]]) -> list[HourStatus]:
    """The books for each (topic, hour) asked for (an hour with no event at all is ``empty``)."""
    report = reconcile(events)
    out = []
    for topic in sorted(set(topics)):
        for d, h in sorted(set(hours)):
            hb = report.hour(topic, hour_ms_of(d, h))
            if hb is None:
                out.append(HourStatus(topic, d, h, 0, 0, 0, 0, 0, False, "empty"))
                continue
            status = "complete" if hb.complete else "incomplete"
            out.append(HourStatus(topic, d, h, hb.produced, hb.mirrored, hb.loaded, hb.missing, hb.duplicates,
                                  hb.complete, status))
    return out


def hours_between(start_ms: int, end_ms: int) -> list[tuple[str, str]]:
    """Hour labels covering [start_ms, end_ms) (at least the hour holding start_ms)."""
    h = start_ms - start_ms % HOUR_MS
    out = [hour_label(h)]
    h += HOUR_MS
    while h < end_ms:
        out.append(hour_label(h))
        h += HOUR_MS
    return out
