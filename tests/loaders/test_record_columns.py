"""Record batches -> Arrow columns: the native walk gives exactly what aiokafka's reader gives, for every
codec, null keys and values, headers, LogAppendTime batches, control batches and ranges cutting batches."""

from __future__ import annotations

import random
import struct

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from ferry.loaders import native
from tests.wire.native_parts import native_or_skip


def batch(base: int, records: list[tuple], codec: int = 0, log_append: int | None = None,
          control: bool = False) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, timestamp=ts, key=key, value=value, headers=headers)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base)
    attributes = struct.unpack_from(">h", buf, 21)[0]
    if log_append is not None:
        attributes |= 0x08
        struct.pack_into(">q", buf, 35, log_append)
    if control:
        attributes |= 0x20
    struct.pack_into(">h", buf, 21, attributes)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def records(rng: random.Random, n: int) -> list[tuple]:
    return [(1_700_000_000_000 + i if i % 17 else 5, None if i % 5 == 0 else b"k%d" % i,
             None if i % 11 == 3 else rng.randbytes(i % 40),
             [("a", b"1"), ("bé", None if i % 2 else b"%d" % i)] if i % 4 else []) for i in range(n)]


@pytest.fixture(scope="module")
def message_set() -> bytes:
    rng = random.Random(1)
    data, base = b"", 0
    for j, codec in enumerate([0, 1, 2, 3, 4, 0, 3]):  # none, gzip, snappy, lz4, zstd
        n = 3 + j * 7
        data += batch(base, records(rng, n), codec, log_append=1_800_000_000_123 if j == 5 else None)
        base += n
        if j == 2:
            data += batch(base, [(0, None, b"\x00\x00\x00\x00", [])], control=True)
            base += 1
    return data


def take(data: bytes, start: int, end: int, use_native: bool, monkeypatch, **kw):
    monkeypatch.setenv("FERRY_NATIVE_DISABLE", "" if use_native else "batch_records,avro_columns")
    native._cache.clear()
    from ferry.loaders.record_columns import SplitRecords

    records_ = SplitRecords("tp", 3, start, end, **kw)
    records_.add(data)
    out = records_.take()
    native._cache.clear()
    return out


@pytest.mark.parametrize("start, end", [(0, 10**9), (5, 60), (23, 24), (0, 0)])
@pytest.mark.parametrize("lean", [False, True])
def test_native_records_equal_aiokafkas(message_set, monkeypatch, start, end, lean):
    native_or_skip("batch_records")
    native_or_skip("avro_columns")
    kw = {"keys": not lean, "headers": not lean}
    got = take(message_set, start, end, True, monkeypatch, **kw)
    want = take(message_set, start, end, False, monkeypatch, **kw)
    assert got.schema == want.schema
    assert got.equals(want), (got.to_pylist()[:2], want.to_pylist()[:2])
    assert got.num_rows == sum(1 for o in range(start, min(end, 169)) if o != 30)  # 30: the control batch
