"""The books: dedupe by guid, per-bucket missing/duplicates, completeness of an hour."""

from __future__ import annotations

import pytest

from ferry.audit.reconciler import reconcile
from ferry.client.audit.bucket import BUCKET_MS, HOUR_MS, bucket_start, hour_start
from ferry.client.audit.counter import AuditCounter
from ferry.client.audit.event import AuditEvent

H = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS  # an hour boundary


def ev(topic, tier, bucket, count, guid=None):
    e = AuditEvent.new(topic, tier, bucket, count, host="h", datacenter="dc", application="app", time_ms=bucket)
    return e if guid is None else AuditEvent(guid, *(getattr(e, f) for f in list(AuditEvent.__dataclass_fields__)[1:]))


def test_buckets_are_ten_minutes_of_utc_event_time():
    assert bucket_start(H + 599_999) == H
    assert bucket_start(H + 600_000) == H + BUCKET_MS
    assert hour_start(H + HOUR_MS - 1) == H


def test_complete_hour_and_dedupe_by_guid():
    events = [ev("t", "producer", H, 100), ev("t", "producer", H + BUCKET_MS, 50),
              ev("t", "mirror", H, 100), ev("t", "mirror", H + BUCKET_MS, 50),
              ev("t", "warehouse", H, 60), ev("t", "warehouse", H, 40), ev("t", "warehouse", H + BUCKET_MS, 50)]
    events.append(events[0])  # the same event seen twice (e.g. re-read): counted once
    report = reconcile(events)
    assert report.duplicate_events == 1
    (h,) = report.hours
    assert (h.topic, h.hour_start, h.produced, h.mirrored, h.loaded, h.missing, h.duplicates, h.complete) == (
        "t", H, 150, 150, 150, 0, 0, True)


def test_missing_and_duplicates_are_per_bucket_and_never_cancel():
    events = [ev("t", "producer", H, 100), ev("t", "producer", H + BUCKET_MS, 100),
              ev("t", "warehouse", H, 90), ev("t", "warehouse", H + BUCKET_MS, 110)]
    (h,) = reconcile(events).hours
    assert (h.produced, h.loaded, h.missing, h.duplicates, h.complete) == (200, 200, 10, 10, False)
    assert [b.missing for b in h.buckets] == [10, 0] and [b.duplicates for b in h.buckets] == [0, 10]


def test_an_hour_is_complete_only_with_data_or_an_explicit_empty_count():
    assert reconcile([ev("t", "warehouse", H, 0)]).hours[0].complete  # explicit zero: complete
    assert not reconcile([ev("t", "producer", H, 0), ev("t", "warehouse", H, 1)]).hours[0].complete
    # loaded without anything produced is a duplicate, not complete
    h = reconcile([ev("t", "warehouse", H, 5)]).hours[0]
    assert (h.duplicates, h.complete) == (5, False)
    # produced but not loaded yet
    h = reconcile([ev("t", "producer", H, 5), ev("t", "mirror", H, 5)]).hours[0]
    assert (h.missing, h.complete, h.mirrored) == (5, False, 5)


def test_filters_by_topic_and_time_and_keeps_other_tiers():
    events = [ev("a", "producer", H, 1), ev("b", "producer", H, 2), ev("a", "producer", H + HOUR_MS, 3),
              ev("a", "replayer", H, 7)]
    assert [(h.topic, h.hour_start) for h in reconcile(events).hours] == [("a", H), ("a", H + HOUR_MS), ("b", H)]
    assert [(h.topic, h.hour_start) for h in reconcile(events, topic="a", since_ms=H + HOUR_MS).hours] == [
        ("a", H + HOUR_MS)]
    assert reconcile(events, topic="a").hours[0].tiers == {"producer": 1, "replayer": 7}


def test_event_json_round_trip_and_validation():
    e = ev("t", "producer", H, 3)
    assert AuditEvent.from_json(e.to_json()) == e
    for bad, msg in [(b"nope", "not JSON"), (b"[]", "not a JSON object"), (b'{"guid":"x"}', "lacks"),
                     (e.to_json().replace(b'"count":3', b'"count":-1'), "negative"),
                     (e.to_json().replace(f'"bucket_start":{H}'.encode(), f'"bucket_start":{H + 1}'.encode()),
                      "10-minute")]:
        with pytest.raises(ValueError, match=msg):
            AuditEvent.from_json(bad)


def test_counter_snapshots_reset_and_restore():
    c = AuditCounter("producer", "app", "dc", host="h")
    for i in range(10):
        c.count("t", H + i * 100_000)  # buckets H (6 messages) and H+10min (4)
    c.count("_audit", H)  # never audited
    events = c.snapshot_and_reset()
    assert [(e.topic, e.bucket_start, e.count) for e in events] == [("t", H, 6), ("t", H + BUCKET_MS, 4)]
    assert len({e.guid for e in events}) == 2 and all(e.tier == "producer" for e in events)
    assert c.snapshot_and_reset() == []
    c.restore(events[:1])  # an event that could not be published comes back, with a new guid
    (again,) = c.snapshot_and_reset()
    assert (again.count, again.bucket_start) == (6, H) and again.guid != events[0].guid
