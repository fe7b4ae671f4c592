"""The batch rewrite keeps every record byte-identical and produces batches a broker accepts."""

from __future__ import annotations

import struct

import crc32c
import pytest
from kafka.record import MemoryRecords
from mirror_batches import build_batch, make_control, records

from ferry.mirror.batch_rewrite import CorruptBatchError, forward_batches, resequence
from ferry.wire.record.control_batch import build_marker
from ferry.wire.record.read_committed import ReadCommitted
from ferry.wire.record.record_batch import validate_batches

T0 = 1_700_000_000_000


def decoded(buf: bytes) -> list[tuple]:
    """Every batch's records as (offset delta, timestamp, key, value, headers), via kafka-python."""
    out = []
    mr = MemoryRecords(bytes(buf))
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc()
        out.append([(r.offset - batch.base_offset, r.timestamp, r.key, r.value, r.headers) for r in batch])
    return out


def batch_meta(buf: bytes) -> list[tuple]:
    out = []
    mr = MemoryRecords(bytes(buf))
    while mr.has_next():
        b = mr.next_batch()
        out.append((b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional, b.compression_type,
                    b.records_count, b.first_timestamp, b.max_timestamp))
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_rewrite_keeps_records_and_stamps_the_mirror_producer(codec: str) -> None:
    sizes = [5, 1, 17]
    batches, offset = [], 100
    for i, n in enumerate(sizes):
        batches.append(build_batch(records(n, T0 + i * 1000, prefix=f"b{i}"), offset, codec,
                                   producer_id=9, producer_epoch=2, base_sequence=offset))
        offset += n
    data = b"".join(batches)
    out = forward_batches(data, 100, producer_id=4242, producer_epoch=3, sequence=10)
    assert out.next_offset == offset and out.messages == sum(sizes) and not out.truncated
    assert out.next_sequence == 10 + sum(sizes)
    assert decoded(out.records) == decoded(data)
    meta = batch_meta(out.records)
    assert [m[:4] for m in meta] == [(4242, 3, 10, False), (4242, 3, 15, False), (4242, 3, 16, False)]
    assert [m[4:] for m in meta] == [m[4:] for m in batch_meta(data)]
    # the compressed payload is untouched: bytes after the 61-byte header are identical
    for (start, size), h, src in zip(out.spans, out.headers, batches, strict=True):
        assert bytes(out.records[start + 61:start + size]) == src[61:]
        assert h.size == size
    # what the offline broker checks: framing and CRC-32C
    assert len(validate_batches(bytes(out.records))) == 3
    assert struct.unpack_from(">q", out.records, 0)[0] == 0  # the target assigns offsets


def test_skips_batches_below_the_fetch_offset_and_forwards_a_straddling_one_whole() -> None:
    b1 = build_batch(records(4, T0), 0)
    b2 = build_batch(records(4, T0), 4)
    b3 = build_batch(records(4, T0), 8)
    data = b1 + b2 + b3
    out = forward_batches(data, 4, 1, 0, 0)  # b1 ends before 4
    assert out.skipped_batches == 1 and out.messages == 8 and out.next_offset == 12
    out = forward_batches(data, 6, 1, 0, 0)  # inside b2: forwarded whole (duplicates, never loss)
    assert out.messages == 8 and [h.base_offset for h in out.headers] == [4, 8]
    out = forward_batches(data, 12, 1, 0, 0)
    assert out.empty and out.next_offset == 12 and out.skipped_batches == 3


def test_control_batches_are_skipped_but_consumed() -> None:
    b1 = build_batch(records(3, T0), 0, producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    ctl = make_control(build_batch(records(1, T0), 3, producer_id=5, producer_epoch=0, base_sequence=3,
                                   transactional=True))
    b3 = build_batch(records(2, T0), 4)
    out = forward_batches(b1 + ctl + b3, 0, 77, 1, 5)
    assert out.next_offset == 6 and out.messages == 5 and out.skipped_batches == 1
    meta = batch_meta(out.records)
    assert [(m[0], m[2], m[3]) for m in meta] == [(77, 5, False), (77, 8, False)]
    validate_batches(bytes(out.records))  # transactional bit cleared: the broker accepts it


def _marker(pid: int, offset: int, committed: bool) -> bytes:
    buf = bytearray(build_marker(pid, 0, committed, timestamp_ms=T0))
    struct.pack_into(">q", buf, 0, offset)  # the leader assigns it; the CRC does not cover it
    return bytes(buf)


@pytest.mark.parametrize("coalesce", [0, 1 << 20])
def test_read_committed_passes_over_aborted_transactions_and_markers(coalesce: int) -> None:
    """Plain data, an aborted transaction of producer 9 interleaved with producer 4's committed one, markers:
    only what a read_committed consumer sees is forwarded, and the offsets still advance past everything."""
    plain = build_batch(records(3, T0, "plain"), 0)
    aborted1 = build_batch(records(2, T0, "ab"), 3, producer_id=9, producer_epoch=0, base_sequence=0,
                           transactional=True)
    kept = build_batch(records(2, T0, "kept"), 5, producer_id=4, producer_epoch=0, base_sequence=0,
                       transactional=True)
    aborted2 = build_batch(records(1, T0, "ab2"), 7, producer_id=9, producer_epoch=0, base_sequence=2,
                           transactional=True)
    data = (plain + aborted1 + kept + aborted2 + _marker(9, 8, committed=False) + _marker(4, 9, committed=True)
            + build_batch(records(2, T0, "after"), 10, producer_id=9, producer_epoch=1, base_sequence=0,
                          transactional=True) + _marker(9, 12, committed=True))
    committed = ReadCommitted([(9, 3)])
    out = forward_batches(data, 0, 77, 1, 0, coalesce, committed)
    assert out.next_offset == 13 and out.messages == 3 + 2 + 2
    values = [v for batch in decoded(bytes(out.records)) for _o, _ts, _k, v, _h in batch]
    assert all(not v.startswith(b"ab") for v in values) and len(values) == 7
    # without the filter (read_uncommitted) the aborted records would be copied too
    assert forward_batches(data, 0, 77, 1, 0, coalesce).messages == 10


def test_an_aborted_transaction_that_began_before_the_fetch_is_still_dropped() -> None:
    """The answer starts after the transaction's first batch: the broker still lists it (its marker is in
    range), so its later batches are dropped."""
    later = build_batch(records(2, T0, "ab"), 20, producer_id=9, producer_epoch=0, base_sequence=5,
                        transactional=True)
    data = later + _marker(9, 22, committed=False) + build_batch(records(1, T0, "x"), 23)
    out = forward_batches(data, 20, 77, 1, 0, 0, ReadCommitted([(9, 11)]))
    assert out.messages == 1 and out.next_offset == 24


def test_truncated_tail_is_left_for_the_next_fetch() -> None:
    b1 = build_batch(records(3, T0), 0)
    b2 = build_batch(records(3, T0), 3)
    out = forward_batches(b1 + b2[:-5], 0, 1, 0, 0)
    assert out.truncated and out.next_offset == 3 and out.messages == 3
    out = forward_batches(b2[:30], 3, 1, 0, 0)
    assert out.truncated and out.empty and out.next_offset == 3


def test_corrupt_batch_is_refused_not_laundered() -> None:
    b1 = bytearray(build_batch(records(3, T0), 0))
    b1[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError) as e:
        forward_batches(bytes(b1), 0, 1, 0, 0)
    assert e.value.offset == 0
    bad_magic = bytearray(build_batch(records(3, T0), 0))
    bad_magic[16] = 1
    with pytest.raises(CorruptBatchError):
        forward_batches(bytes(bad_magic), 0, 1, 0, 0)


def test_sequences_wrap_like_kafka() -> None:
    data = build_batch(records(3, T0), 0) + build_batch(records(2, T0), 3)
    out = forward_batches(data, 0, 1, 0, (1 << 31) - 2)
    assert [m[2] for m in batch_meta(out.records)] == [(1 << 31) - 2, 1]
    assert out.next_sequence == 3


def test_resequence_restamps_for_a_new_producer() -> None:
    data = build_batch(records(3, T0), 0, "lz4") + build_batch(records(2, T0), 3, "gzip")
    out = forward_batches(data, 0, 1, 0, 40)
    nxt = resequence(out.records, out.spans, 99, 0, 0, out.headers)
    assert nxt == 5
    assert [m[:3] for m in batch_meta(out.records)] == [(99, 0, 0), (99, 0, 3)]
    assert decoded(out.records) == decoded(data)
    validate_batches(bytes(out.records))


def _flat(batches: list[list[tuple]]) -> list[tuple]:
    return [r[1:] for b in batches for r in b]  # (timestamp, key, value, headers): offsets are the target's


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_small_batches_are_coalesced_with_every_record_kept(codec: str) -> None:
    """30 batches of 7 records (a negative timestamp delta in each, a control batch among them) become
    a few batches of the same codec under the size limit; records, order and sequences are exact."""
    parts, data_parts, offset = [], [], 500
    for i in range(30):
        recs = records(7, T0 + i * 100, prefix=f"b{i}")
        recs[3] = (T0 - 60_000 - i, *recs[3][1:])
        parts.append(build_batch(recs, offset, codec, producer_id=9, producer_epoch=1, base_sequence=offset))
        data_parts.append(parts[-1])
        offset += 7
        if i == 12:
            parts.append(make_control(build_batch(records(1, T0), offset)))
            offset += 1
    data = b"".join(parts)
    limit = 4 * (len(parts[0]) + 4)
    out = forward_batches(data, 500, producer_id=77, producer_epoch=5, sequence=40, coalesce_bytes=limit)
    assert out.messages == 210 and out.next_offset == offset and out.next_sequence == 40 + 210
    assert 5 <= len(out.headers) < 30  # coalesced, but never beyond the limit
    assert all(size <= limit for _, size in out.spans)
    assert _flat(decoded(out.records)) == _flat(decoded(b"".join(data_parts)))
    meta = batch_meta(out.records)
    seqs = [m[2] for m in meta]
    assert seqs[0] == 40 and all(b - a == m[5] for a, b, m in zip(seqs, seqs[1:], meta, strict=False))
    assert {m[:2] + m[3:5] for m in meta} == {(77, 5, False, batch_meta(parts[0])[0][4])}
    assert out.resume_offsets[0] == 500 and out.end_offsets[-1] == offset
    assert out.resume_offsets[1:] == out.end_offsets[:-1]  # each batch continues where the last one ended
    assert [h.records_count for h in out.headers] == [m[5] for m in meta]
    assert len(validate_batches(bytes(out.records))) == len(out.headers)


def test_large_and_log_append_time_batches_are_not_coalesced() -> None:
    small = [build_batch(records(3, T0 + i), i * 3) for i in range(4)]
    big = build_batch(records(600, T0, prefix="x" * 40), 12)
    lat = bytearray(build_batch(records(3, T0), 612))
    struct.pack_into(">h", lat, 21, 0x08)  # LogAppendTime
    struct.pack_into(">I", lat, 17, crc32c.crc32c(bytes(lat[21:])))
    tail = [build_batch(records(2, T0), 615 + 2 * i) for i in range(2)]
    data = b"".join(small) + big + bytes(lat) + b"".join(tail)
    out = forward_batches(data, 0, 1, 0, 0, coalesce_bytes=1 << 20)
    assert [h.records_count for h in out.headers] == [12, 600, 3, 4]
    assert out.coalesced == [True, False, False, True]  # which ones a too-large refusal may split back
    assert bytes(out.records[out.spans[1][0] + 61:sum(out.spans[1])]) == big[61:]  # forwarded as is
    assert bytes(out.records[out.spans[2][0] + 61:sum(out.spans[2])]) == bytes(lat[61:])
    assert _flat(decoded(out.records)) == _flat(decoded(data))


def test_a_run_that_does_not_rebuild_is_forwarded_unchanged() -> None:
    good = build_batch(records(4, T0), 0)
    bad = bytearray(build_batch(records(4, T0), 4))
    struct.pack_into(">i", bad, 57, 5)  # claims 5 records, holds 4: the builder path gives up
    struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
    out = forward_batches(good + bytes(bad), 0, 1, 0, 0, coalesce_bytes=1 << 20)
    assert len(out.headers) == 2 and bytes(out.records[out.spans[1][0] + 61:]) == bytes(bad[61:])
    assert out.coalesced == [False, False]
