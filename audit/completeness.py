"""Whether an hour is complete: the one decision every user of the books shares (the DAG, `ferry audit
report`, the ``ferry_completeness`` table, the dashboard).

The producers' counts decide, as the live datacenter(s) know them. Producer-tier audit events travel to
the offline cluster through the same mirror as the data, so a stopped mirror holds back both and an hour
would look balanced on offline counts alone. The books therefore merge the live clusters' own `_audit`
(read directly, see :mod:`ferry.audit.live`) with what arrived offline; the reconciler counts each event
once by guid, so a producer event seen on both sides counts once. While any live cluster's counts cannot
be read, no hour can be judged: its status is ``unknown``, never ``complete``.

Statuses: ``complete`` (every bucket loaded == produced, and something was produced or a tier said the
hour is empty), ``incomplete`` (something missing or duplicated), ``empty`` (no audit event at all for
the hour), ``unknown`` (a live cluster's producer counts are unreachable).

Each status also says what it was judged from: ``live`` (the live clusters' producer counts, the default) or
``offline-only`` (only the counts that reached the offline cluster; a configuration must ask for it explicitly,
and every report, table row and published hour so judged carries the mark).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from ferry.audit.reconciler import HourBooks, reconcile
from ferry.client.audit.event import AuditEvent

COMPLETE, INCOMPLETE, EMPTY, UNKNOWN = "complete", "incomplete", "empty", "unknown"
LIVE, OFFLINE_ONLY = "live", "offline-only"  # what an hour was judged from


def hour_label(hour_ms: int) -> tuple[str, str]:
    t = dt.datetime.fromtimestamp(hour_ms / 1000, dt.UTC)
    return t.strftime("%Y-%m-%d"), t.strftime("%H")


def hour_ms_of(dt_s: str, hr_s: str) -> int:
    t = dt.datetime.strptime(f"{dt_s} {hr_s}", "%Y-%m-%d %H").replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def status_of(hour: HourBooks | None, unreachable: Sequence[str] = ()) -> str:
    """The status of one hour's books; ``unreachable`` names live clusters whose counts could not be read."""
    if unreachable:
        return UNKNOWN
    if hour is None:
        return EMPTY
    return COMPLETE if hour.complete else INCOMPLETE


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
    status: str  # complete | incomplete | empty | unknown
    unreachable: list[str] = field(default_factory=list)  # live clusters whose counts could not be read
    completeness: str = LIVE  # judged from the live producers' counts, or offline-only

    @property
    def hour_ms(self) -> int:
        return hour_ms_of(self.dt, self.hr)

    def label(self) -> str:
        return f"{self.topic} {self.dt} {self.hr}:00"

    def describe(self) -> str:
        why = f"; live counts unreachable: {', '.join(self.unreachable)}" if self.unreachable else ""
        if self.completeness == OFFLINE_ONLY:
            why += "; judged from the offline counts only"
        return (f"{self.label()}: {self.status} (produced {self.produced}, mirrored {self.mirrored}, "
                f"loaded {self.loaded}, missing {self.missing}, duplicates {self.duplicates}{why})")

    def to_dict(self) -> dict:
        return asdict(self)


def books(events: Iterable[AuditEvent], topics: Iterable[str], hours: Iterable[tuple[str, str]], *,
          unreachable: Sequence[str] = (), offline_only: bool = False) -> list[HourStatus]:
    """The books for each (topic, hour) asked for, from every event known (live and offline, merged by
    guid by the reconciler); ``offline_only`` marks them judged without any live cluster's counts."""
    source = OFFLINE_ONLY if offline_only else LIVE
    report = reconcile(events)
    out = []
    for topic in sorted(set(topics)):
        for d, h in sorted(set(hours)):
            hb = report.hour(topic, hour_ms_of(d, h))
            status = status_of(hb, unreachable)
            if hb is None:
                out.append(HourStatus(topic, d, h, 0, 0, 0, 0, 0, False, status, list(unreachable), source))
                continue
            out.append(HourStatus(topic, d, h, hb.produced, hb.mirrored, hb.loaded, hb.missing, hb.duplicates,
                                  status == COMPLETE, status, list(unreachable), source))
    return out
