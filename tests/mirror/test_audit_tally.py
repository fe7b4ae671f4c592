"""Audit bucketing of forwarded batches: every record in the bucket of its own timestamp, for every codec."""

from __future__ import annotations

import random
import struct
from collections import Counter

import crc32c
import pytest
from mirror_batches import build_batch, records

from ferry.client.audit.bucket import BUCKET_MS, bucket_start
from ferry.client.audit.counter import AuditCounter
from ferry.mirror.audit_tally import BatchWalkError, tally_batches
from ferry.mirror.batch_rewrite import forward_batches

B0 = 1_700_000_400_000 - 1_700_000_400_000 % BUCKET_MS  # a bucket boundary


def expected(recs_per_batch: list[list]) -> Counter:
    c: Counter = Counter()
    for recs in recs_per_batch:
        for ts, *_ in recs:
            c[bucket_start(ts)] += 1
    return c


def tally(data: bytes, topic: str = "events", coalesce_bytes: int = 0) -> tuple[Counter, int]:
    out = forward_batches(data, 0, 1, 0, 0, coalesce_bytes)
    got: Counter = Counter()

    def count(t: str, ts: int, n: int) -> None:
        assert t == topic
        got[bucket_start(ts)] += n

    decoded = tally_batches(count, topic, out.records, out.spans, out.headers)
    return got, decoded


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd", "gzip", "snappy"])
def test_batches_inside_one_bucket_are_counted_exactly(codec: str) -> None:
    r1 = records(50, B0 + 1000, step_ms=10)
    r2 = records(7, B0 + 5 * BUCKET_MS + 3, step_ms=1)
    got, walked = tally(build_batch(r1, 0, codec) + build_batch(r2, 50, codec))
    assert got == expected([r1, r2]) and walked == 57


ALL_CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_a_record_earlier_than_the_first_lands_in_its_own_bucket(codec: str) -> None:
    """Kafka allows negative timestamp deltas: the header's first/max timestamps may share a bucket
    while a later record belongs to the previous one. The demo's random event times do exactly this."""
    r1 = records(10, B0 + 1000, step_ms=10)
    r1[5] = (B0 - 5000, *r1[5][1:])  # the 6th record happened before the bucket boundary
    got, _ = tally(build_batch(r1, 0, codec))
    assert got == Counter({B0: 9, B0 - BUCKET_MS: 1}) == expected([r1])


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_a_batch_across_a_boundary_is_decoded(codec: str) -> None:
    r1 = records(40, B0 - 20 * 1000, step_ms=1000)  # 20 s before the boundary to 20 s after
    r2 = records(5, B0 + 2 * BUCKET_MS, step_ms=1)
    got, decoded = tally(build_batch(r1, 0, codec) + build_batch(r2, 40, codec))
    assert got == expected([r1, r2]) and decoded == 45
    assert got[B0 - BUCKET_MS] == 20 and got[B0] == 20 + 0  # r1 split 20/20; r2 in its own bucket


def test_log_append_time_batches_count_in_the_broker_time_bucket() -> None:
    buf = bytearray(build_batch(records(10, B0 - 5000, step_ms=1000), 0))
    attrs = struct.unpack_from(">h", buf, 21)[0] | 0x08
    struct.pack_into(">h", buf, 21, attrs)
    struct.pack_into(">q", buf, 35, B0 + 42)  # maxTimestamp = the broker's append time
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    got, decoded = tally(bytes(buf))
    assert got == Counter({B0: 10}) and decoded == 0


def test_tally_feeds_the_audit_counter_and_skips_the_audit_topic() -> None:
    counter = AuditCounter("mirror", "ferry-mirror", "offline", host="h")
    r1 = records(12, B0 - 3000, step_ms=500)
    out = forward_batches(build_batch(r1, 0, "lz4"), 0, 1, 0, 0)
    tally_batches(counter.count, "events", out.records, out.spans, out.headers)
    tally_batches(counter.count, "_audit", out.records, out.spans, out.headers)
    events = counter.snapshot_and_reset()
    assert {(e.topic, e.bucket_start, e.count, e.tier) for e in events} == {
        ("events", B0 - BUCKET_MS, 6, "mirror"), ("events", B0, 6, "mirror")}


@pytest.mark.parametrize("coalesce_bytes", [0, 1 << 20])
@pytest.mark.parametrize("codec", ALL_CODECS)
def test_shuffled_event_times_over_many_buckets_are_exact(codec: str, coalesce_bytes: int) -> None:
    """Random event times (many negative deltas, five buckets) in several batches, forwarded as they are
    or coalesced into one: every bucket exact."""
    rng = random.Random(codec)
    batches = []
    for _ in range(4):
        recs = records(300, B0, step_ms=0)
        batches.append([(B0 + rng.randrange(-2 * BUCKET_MS, 3 * BUCKET_MS), *r[1:]) for r in recs])
    data, base = b"", 0
    for recs in batches:
        data += build_batch(recs, base, codec)
        base += len(recs)
    got, walked = tally(data, coalesce_bytes=coalesce_bytes)
    assert got == expected(batches) and walked == 1200 and len(got) == 5


def test_a_one_record_batch_is_counted_from_its_header() -> None:
    got, walked = tally(build_batch(records(1, B0 - 1), 0, "zstd"))
    assert got == Counter({B0 - BUCKET_MS: 1}) and walked == 0


def _refresh_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def test_records_that_do_not_parse_raise_batch_walk_error() -> None:
    good = build_batch(records(10, B0 + 5), 0)
    short = bytearray(good)
    struct.pack_into(">i", short, 57, 12)  # the header claims more records than the section holds
    with pytest.raises(BatchWalkError):
        tally(_refresh_crc(short))
    garbage = bytearray(good)
    garbage[61:64] = b"\xff\xff\xff"  # the first record's length varint runs off
    with pytest.raises(BatchWalkError):
        tally(_refresh_crc(garbage))
    codec = bytearray(good)
    struct.pack_into(">h", codec, 21, 6)  # compression codec 6 does not exist
    with pytest.raises(BatchWalkError):
        tally(_refresh_crc(codec))
