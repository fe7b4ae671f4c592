"""Balancing the books: each tier's counts against the producer's, per topic, hour and bucket.

Events are deduplicated by guid first (`_audit` is mirrored like any topic, and an event may reach it
more than once), then summed per (topic, tier, bucket). Per bucket, ``missing`` is what the producers
sent and the warehouse does not have, ``duplicates`` what the warehouse has beyond that; an hour's figures
are the sums over its buckets, so a loss in one bucket is never hidden by a duplicate in another.

An hour is *complete* when every bucket of it that any tier reported has ``loaded == produced``, and
either something was produced or the hour is explicitly empty (some tier published a zero-count event in
it, e.g. a loader saying "I loaded this hour and it had no rows").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ferry.client.audit.bucket import hour_start
from ferry.client.audit.event import AuditEvent

PRODUCER, MIRROR, WAREHOUSE = "producer", "mirror", "warehouse"


@dataclass
class BucketBooks:
    topic: str
    bucket_start: int
    tiers: dict[str, int] = field(default_factory=dict)
    explicit_empty: bool = False

    @property
    def produced(self) -> int:
        return self.tiers.get(PRODUCER, 0)

    @property
    def mirrored(self) -> int:
        return self.tiers.get(MIRROR, 0)

    @property
    def loaded(self) -> int:
        return self.tiers.get(WAREHOUSE, 0)

    @property
    def missing(self) -> int:
        return max(self.produced - self.loaded, 0)

    @property
    def duplicates(self) -> int:
        return max(self.loaded - self.produced, 0)


@dataclass
class HourBooks:
    topic: str
    hour_start: int
    buckets: list[BucketBooks] = field(default_factory=list)

    def _sum(self, attr: str) -> int:
        return sum(getattr(b, attr) for b in self.buckets)

    @property
    def produced(self) -> int:
        return self._sum("produced")

    @property
    def mirrored(self) -> int:
        return self._sum("mirrored")

    @property
    def loaded(self) -> int:
        return self._sum("loaded")

    @property
    def missing(self) -> int:
        return self._sum("missing")

    @property
    def duplicates(self) -> int:
        return self._sum("duplicates")

    @property
    def tiers(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for b in self.buckets:
            for tier, n in b.tiers.items():
                out[tier] += n
        return dict(sorted(out.items()))

    @property
    def complete(self) -> bool:
        balanced = all(b.loaded == b.produced for b in self.buckets)
        return balanced and (self.produced > 0 or any(b.explicit_empty for b in self.buckets))

    def to_dict(self) -> dict:
        return {
            "topic": self.topic, "hour_start": self.hour_start, "produced": self.produced,
            "mirrored": self.mirrored, "loaded": self.loaded, "missing": self.missing,
            "duplicates": self.duplicates, "complete": self.complete, "tiers": self.tiers,
            "buckets": [{"bucket_start": b.bucket_start, "tiers": dict(sorted(b.tiers.items())),
                         "missing": b.missing, "duplicates": b.duplicates} for b in self.buckets],
        }


@dataclass
class Report:
    hours: list[HourBooks]
    events: int = 0  # distinct events used
    duplicate_events: int = 0  # copies of an already seen guid (mirrored or re-read), ignored

    def topic(self, name: str) -> list[HourBooks]:
        return [h for h in self.hours if h.topic == name]

    def hour(self, topic: str, hour_start_ms: int) -> HourBooks | None:
        for h in self.hours:
            if h.topic == topic and h.hour_start == hour_start_ms:
                return h
        return None

    def to_dict(self) -> dict:
        return {"events": self.events, "duplicate_events": self.duplicate_events,
                "hours": [h.to_dict() for h in self.hours]}


def reconcile(events: Iterable[AuditEvent], *, topic: str | None = None, since_ms: int | None = None,
              until_ms: int | None = None) -> Report:
    """The books for every (topic, hour) the events mention, optionally restricted to a topic and a
    [since_ms, until_ms) window of event time."""
    seen: set[str] = set()
    dup_events = 0
    buckets: dict[tuple[str, int], BucketBooks] = {}
    for e in events:
        if e.guid in seen:
            dup_events += 1
            continue
        seen.add(e.guid)
        if topic is not None and e.topic != topic:
            continue
        if since_ms is not None and e.bucket_end <= since_ms:
            continue
        if until_ms is not None and e.bucket_start >= until_ms:
            continue
        b = buckets.get((e.topic, e.bucket_start))
        if b is None:
            b = buckets[(e.topic, e.bucket_start)] = BucketBooks(e.topic, e.bucket_start)
        b.tiers[e.tier] = b.tiers.get(e.tier, 0) + e.count
        if e.count == 0:
            b.explicit_empty = True
    hours: dict[tuple[str, int], HourBooks] = {}
    for (t, start), b in sorted(buckets.items()):
        key = (t, hour_start(start))
        h = hours.get(key)
        if h is None:
            h = hours[key] = HourBooks(t, key[1])
        h.buckets.append(b)
    return Report(hours=[hours[k] for k in sorted(hours)], events=len(seen), duplicate_events=dup_events)
