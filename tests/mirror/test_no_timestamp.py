"""Records without a timestamp (-1, Kafka's NO_TIMESTAMP) through the mirror's audit counting and forwarding.

The rule (client/audit/bucket.py): -1 is counted like any timestamp, by the floor rule, in
``bucket_start(-1) == -BUCKET_MS``, at every tier; nothing raises, and forwarding keeps -1 as it is.
"""

from __future__ import annotations

import struct
from collections import Counter

import pytest
from aiokafka.record._crecords.default_records import DefaultRecordBatch
from mirror_batches import build_batch, records

from ferry.client.audit.bucket import BUCKET_MS, NO_TIMESTAMP, bucket_start
from ferry.client.audit.counter import AuditCounter
from ferry.mirror.audit_tally import bucket_counts, count_batch, tally_batches
from ferry.mirror.batch_rewrite import forward_batches
from ferry.wire.record import batch_concat
from ferry.wire.record.record_batch import read_header

T = 1_700_000_400_000 - 1_700_000_400_000 % BUCKET_MS + 1234  # inside one bucket
NONE_BUCKET = -BUCKET_MS
ALL_CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def stamped(stamps: list[int], prefix: str = "m") -> list:
    return [(ts, *r[1:]) for ts, r in zip(stamps, records(len(stamps), 0, prefix), strict=True)]


def expected(stamps: list[int]) -> Counter:
    return Counter(bucket_start(ts) for ts in stamps)


def read_stamps(data: bytes | bytearray, spans) -> list[int]:
    out = []
    for start, size in spans:
        out += [r.timestamp for r in DefaultRecordBatch(bytes(data[start:start + size]))]
    return out


def test_the_bucket_of_no_timestamp_is_the_one_before_the_epoch_at_every_tier() -> None:
    assert bucket_start(NO_TIMESTAMP) == NONE_BUCKET == -600_000
    producer = AuditCounter("producer", "app", host="h")
    producer.count("events", NO_TIMESTAMP, 3)  # what the producer's delivery report says for such a record
    mirror = AuditCounter("mirror", "ferry-mirror", host="h")
    data = build_batch(stamped([-1, -1, -1]), 0)
    out = forward_batches(data, 0, 1, 0, 0)
    tally_batches(mirror.count, "events", out.records, out.spans, out.headers)
    assert ({(e.topic, e.bucket_start, e.count) for e in producer.snapshot_and_reset()}
            == {(e.topic, e.bucket_start, e.count) for e in mirror.snapshot_and_reset()}
            == {("events", NONE_BUCKET, 3)})


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("stamps", [[-1, -1, -1, -1], [-1, T, -1, T + 5], [T, -1, T + 7, -1], [-1, T - BUCKET_MS]])
def test_count_batch_counts_records_without_a_timestamp_in_the_none_bucket(codec: str, stamps: list[int]) -> None:
    data = build_batch(stamped(stamps), 40, codec)
    h = read_header(data)
    assert h.base_timestamp == stamps[0]  # the batch on the wire really carries -1 where the record has none
    assert [r.timestamp for r in DefaultRecordBatch(data)] == stamps
    counts: Counter = Counter()
    assert count_batch(counts, data, h) is True  # walked, not the "does not parse" fallback
    assert counts == expected(stamps) and counts[NONE_BUCKET] == stamps.count(-1)
    assert bucket_counts(data, len(stamps)) == dict(expected(stamps))


def test_a_one_record_batch_without_a_timestamp_is_counted_from_its_header() -> None:
    data = build_batch(stamped([-1]), 0, "zstd")
    counts: Counter = Counter()
    assert count_batch(counts, data, read_header(data)) is True
    assert counts == Counter({NONE_BUCKET: 1})


def test_the_native_walk_refuses_no_timestamp_and_the_general_path_counts_it() -> None:
    data = build_batch(stamped([T, -1, T + 1]), 0)
    with pytest.raises(batch_concat.RecordWalkError, match="timestamp -1"):
        batch_concat.count_records(data, BUCKET_MS)
    with pytest.raises(batch_concat.RecordWalkError):
        batch_concat.concat_records(bytearray(), [data, data], 1, 0, 0, BUCKET_MS)
    counts: Counter = Counter()
    assert count_batch(counts, data, read_header(data))
    assert counts == Counter({bucket_start(T): 2, NONE_BUCKET: 1})


def two_batches(stamps: list[int], codec: str) -> tuple[bytes, list[int]]:
    return (build_batch(stamped(stamps, "a"), 0, codec) + build_batch(stamped(stamps, "b"), len(stamps), codec),
            stamps + stamps)


@pytest.mark.parametrize("coalesce_bytes", [0, 1 << 20])
@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
@pytest.mark.parametrize("stamps", [[-1, -1, -1], [-1, T, -1], [-1, -1, T], [T, -1, T + 5], [-5, -1, T]])
def test_forwarding_keeps_no_timestamp_and_tally_counts_it(codec: str, coalesce_bytes: int,
                                                            stamps: list[int]) -> None:
    """Forwarded as they are or coalesced: every record reads back with its own timestamp (-1 included) and
    the mirror's counts equal the source's, bucket for bucket."""
    data, all_stamps = two_batches(stamps, codec)
    out = forward_batches(data, 0, 1, 0, 0, coalesce_bytes)
    assert read_stamps(out.records, out.spans) == all_stamps
    got: Counter = Counter()

    def count(topic: str, ts: int, n: int) -> None:
        got[bucket_start(ts)] += n

    tally_batches(count, "events", out.records, out.spans, out.headers)
    assert got == expected(all_stamps)
    for (start, size), h, made in zip(out.spans, out.headers, out.counts, strict=True):  # as the ack counts
        acked: Counter = Counter()
        if made is None:
            assert count_batch(acked, out.records[start:start + size], h)
        else:
            acked.update(made)
        got.subtract(acked)
    assert not +got and not -got


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_a_run_led_by_no_timestamp_is_not_rebuilt_with_the_next_records_time(codec: str) -> None:
    """aiokafka's builder reads a first timestamp of -1 as "none yet": re-built, [-1, T] would come back as
    [T, T]. Such a run is forwarded batch by batch, unchanged; a run of -1 only still coalesces."""
    data, all_stamps = two_batches([-1, T, T + 1], codec)
    out = forward_batches(data, 0, 1, 0, 0, 1 << 20)
    assert out.coalesced == [False, False] and read_stamps(out.records, out.spans) == all_stamps
    data, all_stamps = two_batches([-1, -1], codec)
    out = forward_batches(data, 0, 1, 0, 0, 1 << 20)
    assert out.coalesced == [True] and read_stamps(out.records, out.spans) == all_stamps
    assert (out.headers[0].base_timestamp, out.headers[0].max_timestamp) == (-1, -1)


def test_a_hand_built_batch_with_base_timestamp_minus_one() -> None:
    """Independent of any builder: a v2 batch written field by field, baseTimestamp -1, delta 0."""
    import crc32c

    def varint(v: int) -> bytes:
        z, b = (v << 1) ^ (v >> 63), bytearray()
        while z >= 0x80:
            b.append((z & 0x7F) | 0x80)
            z >>= 7
        return bytes(b + bytes([z]))

    body = b""
    for i in range(3):
        rec = b"\0" + varint(0) + varint(i) + varint(-1) + varint(2) + b"v%d" % i + varint(0)
        body += varint(len(rec)) + rec
    tail = struct.pack(">hiqqqhii", 0, 2, -1, -1, -1, -1, -1, 3) + body
    batch = struct.pack(">qiib", 100, 4 + 1 + 4 + len(tail), 0, 2) + struct.pack(">I", crc32c.crc32c(tail)) + tail
    h = read_header(batch)
    assert (h.base_timestamp, h.records_count) == (-1, 3)
    counts: Counter = Counter()
    assert count_batch(counts, batch, h) and counts == Counter({NONE_BUCKET: 3})
    out = forward_batches(batch, 100, 1, 0, 0, 1 << 20)
    assert read_stamps(out.records, out.spans) == [-1, -1, -1]
