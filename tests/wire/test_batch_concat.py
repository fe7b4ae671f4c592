"""batch_concat: uncompressed batches concatenated record by record, checked against aiokafka's reader (the
records) and builder (the bytes), its native module against its pure-Python twin, and corrupt input."""

from __future__ import annotations

import random
import struct
from collections import Counter

import crc32c
import pytest
from aiokafka.record._crecords.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from ferry.wire.record import batch_concat
from ferry.wire.record.batch_concat import RecordWalkError, concat_records, count_records
from ferry.wire.record.errors import CorruptRecordError
from tests.wire.native_parts import native_or_skip, needs_native

BUCKET = 600_000
T0 = 1_700_000_400_000 - 1_700_000_400_000 % BUCKET + 1_000  # just after a bucket boundary


def build(recs: list[tuple], base_offset: int = 0) -> bytes:
    """A v2 batch by kafka-python's builder (an implementation independent of both under test)."""
    b = KafkaPythonBuilder(2, 0, False, 5, 1, 9, batch_size=1 << 30)
    for i, (ts, key, value, headers) in enumerate(recs):
        b.append(i, ts, key, value, headers)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base_offset)
    return bytes(buf)


def read(batch: bytes | bytearray) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in DefaultRecordBatch(bytes(batch))]


def varied(n: int, ts: int, rng: random.Random) -> list[tuple]:
    """Null and empty keys/values, headers (a non-ASCII UTF-8 key, a null value), negative deltas."""
    out = []
    for i in range(n):
        key = None if i % 4 == 0 else (b"" if i % 4 == 1 else rng.randbytes(rng.randint(1, 40)))
        value = None if i % 7 == 3 else rng.randbytes(rng.choice([0, 1, 63, 64, 200, 3000]))
        headers = [] if i % 3 else [("ferry.host", b"h1"), ("größe", None), ("", b"")][: 1 + i % 3]
        out.append((ts + rng.randint(-2 * BUCKET, 2 * BUCKET), key, value, headers))
    return out


IMPLS = ["native", "python"]


@pytest.fixture(params=IMPLS)
def impl(request, monkeypatch):
    if request.param == "native":
        native_or_skip("batch_concat")
    else:
        monkeypatch.setattr(batch_concat, "_native", None)
    return request.param


def test_records_read_back_identical_and_counted_per_bucket(impl: str) -> None:
    rng = random.Random(20)
    sources = [build(varied(rng.randint(1, 60), T0 + i * 5_000, rng), 100 + 60 * i) for i in range(12)]
    out = bytearray(b"prefix")
    n, max_ts, buckets = concat_records(out, [memoryview(s) for s in sources], 77, 3, 40, BUCKET)
    merged = out[6:]
    want = [r[1:] for s in sources for r in read(s)]
    got = read(merged)
    assert [r[1:] for r in got] == want  # timestamp, key, value, headers: every record, in order
    assert [r[0] for r in got] == list(range(len(want))) and n == len(want)
    stamps = [r[0] for r in want]
    assert max_ts == max(stamps) and buckets == dict(Counter(ts - ts % BUCKET for ts in stamps))
    assert len(buckets) > 2  # the records span several buckets, some before the first one's
    base_offset, length, epoch, magic, crc, attrs, last_delta, base_ts, mx, pid, pepoch, seq, count = \
        struct.unpack_from(">qiibIhiqqqhii", merged)
    assert (base_offset, length, epoch, magic, attrs) == (0, len(merged) - 12, -1, 2, 0)
    assert (last_delta, count, mx, pid, pepoch, seq) == (n - 1, n, max_ts, 77, 3, 40)
    assert base_ts == struct.unpack_from(">q", sources[0], 27)[0]
    assert crc == crc32c.crc32c(bytes(merged[21:])) and DefaultRecordBatch(bytes(merged)).validate_crc()
    assert count_records(merged, BUCKET) == (n, buckets)
    assert all(count_records(s, BUCKET)[0] == len(read(s)) for s in sources)


def test_same_bytes_as_aiokafkas_builder(impl: str) -> None:
    rng = random.Random(7)
    sources = [build(varied(50, T0 + i * 1_000, rng), 50 * i) for i in range(5)]
    builder = DefaultRecordBatchBuilder(2, 0, 0, 1234, 2, 500, 1 << 30)
    for i, (_, ts, key, value, headers) in enumerate(r for s in sources for r in read(s)):
        builder.append(i, ts, key, value, headers)
    want = bytes(builder.build())
    out = bytearray()
    concat_records(out, sources, 1234, 2, 500, BUCKET)
    assert bytes(out) == want


@needs_native("batch_concat")
def test_native_and_python_twin_agree() -> None:
    rng = random.Random(3)
    for _ in range(20):
        sources = [build(varied(rng.randint(1, 30), T0 + rng.randint(0, 10 ** 9), rng)) for _ in range(5)]
        a, b = bytearray(b"x"), bytearray(b"x")
        assert batch_concat._native.concat(a, sources, 9, 1, 7, BUCKET) == \
            batch_concat._concat_py(b, sources, 9, 1, 7, BUCKET)
        assert a == b


def _fix_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def _with_record_bytes(recs: list[tuple], old: bytes, new: bytes) -> bytes:
    buf = bytearray(build(recs))
    i = buf.index(old, 61)
    buf[i:i + len(old)] = new
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    return _fix_crc(buf)


GOOD = [(T0, b"k", b"value-1", [("h", b"v")]), (T0 + 5, None, b"value-2", [])]


def _cases() -> dict[str, bytes]:
    good = build(GOOD)
    trailing = bytearray(good + b"\0")
    struct.pack_into(">i", trailing, 8, len(trailing) - 12)
    too_many = bytearray(good)
    struct.pack_into(">i", too_many, 57, 3)
    no_ts = bytearray(build([(T0, b"k", b"v", []), (T0 + 1, b"k", b"v", [])]))
    struct.pack_into(">q", no_ts, 27, -1)  # base -1, deltas 0 and 1: the first record has no timestamp
    return {
        "truncated record": good[:-3],
        "trailing bytes": _fix_crc(trailing),
        "more records than bytes": _fix_crc(too_many),
        "non-UTF-8 header key": _with_record_bytes(GOOD, b"\x02h\x02v", b"\x02\xff\x02v"),
        "negative header count": _with_record_bytes(GOOD, b"value-2\x00", b"value-2\x01"),
        "key length past the record": _with_record_bytes(GOOD, b"\x02k\x0evalue-1", b"\x04k\x0evalue-1"),
        "null key as -2": _with_record_bytes(GOOD, b"\x01\x0evalue-2", b"\x03\x0evalue-2"),
        "no timestamp": _fix_crc(no_ts),
        "compressed": build_compressed(),
    }


def build_compressed() -> bytes:
    b = DefaultRecordBatchBuilder(2, 3, 0, -1, -1, -1, 1 << 30)  # lz4 (kafka-python's keeps small ones plain)
    b.append(0, T0, b"k", b"v", [])
    b.append(1, T0, b"k", b"v", [])
    out = bytes(b.build())
    assert struct.unpack_from(">h", out, 21)[0] & 7 == 3
    return out


@pytest.mark.parametrize("case", list(_cases()))
def test_corrupt_or_unusual_records_are_refused_and_nothing_is_written(impl: str, case: str) -> None:
    bad = _cases()[case]
    out = bytearray(b"earlier batches")
    with pytest.raises(RecordWalkError, match=r"batch at offset 0|base timestamp"):
        concat_records(out, [build(GOOD), bad], 1, 0, 0, BUCKET)
    assert out == b"earlier batches"
    with pytest.raises(RecordWalkError):
        count_records(bad, BUCKET)


def test_random_damage_is_refused_or_reads_back_exactly(impl: str) -> None:
    """The strict walk takes a subset of what aiokafka reads: whatever it takes (after random byte damage)
    reads back from the new batch with the same keys, values, headers and timestamps, counted the same."""
    rng = random.Random(11)
    good = build(varied(8, T0, rng))
    taken = refused = 0
    for _ in range(300 if impl == "native" else 120):
        buf = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(61, len(buf))] = rng.randrange(256)
        out = bytearray()
        try:
            n, _, buckets = concat_records(out, [good, bytes(buf)], 1, 0, 0, BUCKET)
        except RecordWalkError:
            refused += 1
            assert out == b""
            continue
        taken += 1
        want = [r[1:] for r in read(good) + read(buf)]
        assert [r[1:] for r in read(out)] == want and n == len(want)
        assert buckets == dict(Counter(ts - ts % BUCKET for ts, *_ in want))
    assert taken and refused


def test_a_fragment_is_refused_without_reading_past_it(impl: str) -> None:
    for fragment in (b"", b"\x00" * 5, build(GOOD)[:60]):
        with pytest.raises(RecordWalkError, match="not a whole v2 batch"):
            count_records(fragment, BUCKET)
        out = bytearray()
        with pytest.raises(RecordWalkError):
            concat_records(out, [build(GOOD), fragment], 1, 0, 0, BUCKET)
        assert out == b""


def test_the_first_buckets_of_the_epoch_and_back_and_forth(impl: str) -> None:
    """The walk keeps its current bucket's bounds and divides only when a record leaves them: records at
    the epoch's first milliseconds open bucket 0, and records going back and forth across a boundary are
    each counted where they belong."""
    stamps = [0, 1, BUCKET - 1, BUCKET, BUCKET - 1, 5, 3 * BUCKET + 7, 2 * BUCKET, BUCKET]
    batch = build([(ts, None, b"v", []) for ts in stamps])
    assert count_records(batch, BUCKET) == (len(stamps), dict(Counter(ts - ts % BUCKET for ts in stamps)))
    out = bytearray()
    n, max_ts, buckets = concat_records(out, [batch, build([(2, None, b"w", [])], 9)], 1, 0, 0, BUCKET)
    assert (n, max_ts) == (10, 3 * BUCKET + 7)
    assert buckets == dict(Counter(ts - ts % BUCKET for ts in [*stamps, 2]))


def test_check_crcs_refuses_a_damaged_source_and_writes_nothing(impl: str) -> None:
    """check_crcs=True: each source's CRC-32C is checked before its records are walked (the mirror's scan leaves
    uncompressed runs to this); a mismatch raises CorruptRecordError with the batch's offset, ``out`` unchanged."""
    good, later = build(GOOD), bytearray(build(GOOD, 40))
    later[-3] ^= 0x10
    out = bytearray(b"earlier batches")
    with pytest.raises(CorruptRecordError, match="batch at offset 40: CRC-32C") as raised:
        concat_records(out, [good, later], 1, 0, 0, BUCKET, check_crcs=True)
    assert raised.value.offset == 40 and out == b"earlier batches"
    with pytest.raises(CorruptRecordError) as raised:
        concat_records(out, [good, good[:30]], 1, 0, 0, BUCKET, check_crcs=True)
    assert raised.value.offset == -1 and out == b"earlier batches"
    n, _, _ = concat_records(out, [good, later], 1, 0, 0, BUCKET)  # unchecked: the caller's business
    assert n == 2 * len(GOOD)
    checked = bytearray()
    concat_records(checked, [good, good], 1, 0, 0, BUCKET, check_crcs=True)
    unchecked = bytearray()
    concat_records(unchecked, [good, good], 1, 0, 0, BUCKET)
    assert checked == unchecked
