"""Coalescing by native record concatenation: the same records and bytes as aiokafka's rebuild, the audit
counts made by the same walk (equal to what count_batch gives on the forwarded batch and to the record
timestamps), and whatever the walk refuses goes the old way (re-built, or forwarded unchanged)."""

from __future__ import annotations

import random
import struct
from collections import Counter

import crc32c
from mirror_batches import build_batch, records

from ferry.client.audit.bucket import BUCKET_MS, bucket_start
from ferry.mirror import batch_rewrite
from ferry.mirror.audit_tally import count_batch
from ferry.mirror.batch_rewrite import forward_batches
from ferry.wire.record import batch_concat
from tests.wire.native_parts import needs_native

B0 = 1_700_000_400_000 - 1_700_000_400_000 % BUCKET_MS
pytestmark = needs_native("batch_concat")


def _sources(n_batches: int, seed: int) -> tuple[bytes, list[list[tuple]]]:
    rng = random.Random(seed)
    parts, recs_per, offset = [], [], 0
    for i in range(n_batches):
        recs = records(rng.randint(2, 50), B0 + i * 1000, prefix=f"b{i}")
        recs = [(B0 + rng.randrange(-BUCKET_MS, 2 * BUCKET_MS), *r[1:]) for r in recs]  # negative deltas
        parts.append(build_batch(recs, offset, producer_id=9, producer_epoch=1, base_sequence=offset))
        recs_per.append(recs)
        offset += len(recs)
    return b"".join(parts), recs_per


def _counts_of(out) -> list[Counter]:
    got = []
    for (start, size), h in zip(out.spans, out.headers, strict=True):
        c: Counter = Counter()
        assert count_batch(c, memoryview(out.records)[start:start + size], h)
        got.append(c)
    return got


def test_native_coalescing_gives_the_builders_bytes_and_its_own_counts(monkeypatch) -> None:
    data, recs_per = _sources(40, 1)
    native = forward_batches(data, 0, 77, 5, 40, coalesce_bytes=16 << 10)
    monkeypatch.setattr(batch_concat, "NATIVE", False)  # the path taken when the module is not built
    rebuilt = forward_batches(data, 0, 77, 5, 40, coalesce_bytes=16 << 10)
    assert bytes(native.records) == bytes(rebuilt.records)
    assert (native.spans, native.headers, native.coalesced) == (rebuilt.spans, rebuilt.headers, rebuilt.coalesced)
    assert native.resume_offsets == rebuilt.resume_offsets and native.end_offsets == rebuilt.end_offsets
    assert native.next_sequence == rebuilt.next_sequence and native.messages == sum(map(len, recs_per))
    assert sum(native.coalesced) >= 3 and rebuilt.counts == [None] * len(rebuilt.headers)
    assert [c is not None for c in native.counts] == native.coalesced
    # the walk's counts are exactly what count_batch finds in the forwarded batch (the ack-time rule)
    for made, walked in zip(native.counts, _counts_of(native), strict=True):
        assert made is None or Counter(made) == walked
    total: Counter = sum(_counts_of(native), Counter())
    assert total == Counter(bucket_start(ts) for recs in recs_per for ts, *_ in recs)
    assert len(total) >= 3


def test_a_run_with_a_header_key_that_is_not_utf8_is_forwarded_unchanged() -> None:
    """The native walk refuses it, aiokafka's reader cannot read it either: the run travels batch by batch,
    counted on ack by count_batch's rule (the bucket of the batch's first timestamp)."""
    good = build_batch(records(4, B0 + 10), 0)
    bad = bytearray(build_batch([(B0 - 5000, b"k", b"v", [("h", b"x")]), (B0 + 5, b"k", b"v", [])], 4))
    i = bad.index(b"\x02h\x02x")
    bad[i + 1] = 0xFF
    struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
    out = forward_batches(good + bytes(bad), 0, 1, 0, 0, coalesce_bytes=1 << 20)
    assert out.coalesced == [False, False] and out.counts == [None, None]
    assert bytes(out.records[out.spans[1][0] + 61:]) == bytes(bad[61:])
    c: Counter = Counter()
    assert not count_batch(c, memoryview(out.records)[out.spans[1][0]:], out.headers[1])
    assert c == Counter({bucket_start(B0 - 5000): 2})


def test_records_the_walk_refuses_but_aiokafka_reads_are_rebuilt(monkeypatch) -> None:
    """A null key written as length -2 (aiokafka reads it as null): the walk leaves the run to the rebuild."""
    good = build_batch(records(3, B0 + 10), 0)
    odd = bytearray(build_batch([(B0 + 20, None, b"value", []), (B0 + 21, b"k", b"v", [])], 3))
    i = odd.index(b"\x01\x0avalue")
    odd[i] = 0x03  # zigzag -2
    struct.pack_into(">I", odd, 17, crc32c.crc32c(bytes(odd[21:])))
    out = forward_batches(good + bytes(odd), 0, 1, 0, 0, coalesce_bytes=1 << 20)
    assert out.coalesced == [True] and out.counts == [None]  # re-built by aiokafka, counted on ack
    assert _counts_of(out) == [Counter({B0: 5})]


def test_compressed_runs_keep_the_rebuild() -> None:
    data = build_batch(records(5, B0 + 1), 0, "lz4") + build_batch(records(5, B0 + 2), 5, "lz4")
    out = forward_batches(data, 0, 1, 0, 0, coalesce_bytes=1 << 20)
    assert out.coalesced == [True] and out.counts == [None]
    assert out.headers[0].attributes & 7 == 3


def test_the_ack_counts_a_coalesced_batch_from_its_walk_without_reading_it_again(monkeypatch) -> None:
    from ferry.mirror.partition_mirror import PartitionMirror, PendingBatch
    from ferry.mirror.stream_producing import StreamProducer

    data, recs_per = _sources(6, 2)
    out = forward_batches(data, 0, 1, 0, 0, coalesce_bytes=1 << 20)
    assert out.coalesced == [True]
    b = PendingBatch(out.records, *out.spans[0], out.headers[0], 0, 0, counts=out.counts[0])
    pm = PartitionMirror("events", 0, 0)
    monkeypatch.setattr("ferry.mirror.stream_producing.count_batch", None)  # a second walk would fail
    StreamProducer._tally(None, pm, b)
    assert pm.counts == Counter(bucket_start(ts) for recs in recs_per for ts, *_ in recs)
    assert batch_rewrite.COALESCE_MAX_SOURCE > len(data) // 6
