"""wire/record/_crc32c.pyx (batch_bytes.h's CRC-32C for Python callers) against the ``crc32c`` package: every
length around the three-stream step, unaligned starts, continued CRCs, any buffer type; and validate_batches,
which uses it, still refusing a damaged batch."""

from __future__ import annotations

import random

import crc32c
import pytest

from ferry.wire.record import record_batch
from ferry.wire.record.errors import CorruptRecordError
from ferry.wire.record.message_set_builder import MessageSetBuilder
from tests.wire.native_parts import native_or_skip

native = native_or_skip("crc32c")


def test_the_same_crc_as_the_package_on_every_length_and_start() -> None:
    """batch_bytes.h's CRC-32C (the broker's, the mirror's scan and concatenation): three interleaved streams of
    256 bytes joined by multiplication, then 8 bytes and single bytes at a time; lengths around those steps,
    unaligned starts, and the table every CPU without SSE 4.2 runs."""
    rng = random.Random(3)
    block = 256
    lengths = [0, 1, 7, 8, 9, 63, 64, 270, 4099, 12_500, 1 << 20]
    lengths += [k * 3 * block + d for k in (1, 2, 5) for d in (-9, -8, -1, 0, 1, 8, 15)]
    steps = list(range(0, 80)) + [767, 768, 769, 1535, 1536, 1537, 2304, 3 * block * 4]
    cases = [(start, n) for start in range(9) for n in steps] + [(start, n) for n in lengths for start in (0, 1, 5)]
    for start, n in cases:
        piece = memoryview(rng.randbytes(n + start))[start:]
        want = crc32c.crc32c(bytes(piece))
        assert native.crc32c(piece) == want, (n, start)
        assert native.crc32c(piece, hardware=False) == want, (n, start)
        assert native.crc32c(piece[n // 2:], native.crc32c(piece[:n // 2]), hardware=False) == want, (n, start)


def test_a_crc_continued_is_the_crc_of_the_whole() -> None:
    rng = random.Random(4)
    for _ in range(200):
        data = rng.randbytes(rng.randrange(0, 5000))
        cut = rng.randrange(0, len(data) + 1)
        assert native.crc32c(data[cut:], native.crc32c(data[:cut])) == crc32c.crc32c(data)
        assert native.crc32c(data, 0, True) == crc32c.crc32c(data)  # the interpreter lock released or not
    big = random.Random(5).randbytes(1 << 20)
    assert native.crc32c(big, 7, True) == native.crc32c(big, 7) == crc32c.crc32c(big, 7)
    for buf in (b"ferry", bytearray(b"ferry"), memoryview(b"xferry")[1:]):
        assert native.crc32c(buf) == crc32c.crc32c(b"ferry")


def test_validate_batches_uses_it_and_still_refuses_damage() -> None:
    assert record_batch._native_crc32c is native.crc32c
    batch = bytearray(MessageSetBuilder(200).build([bytes([i]) * 200 for i in range(50)]))
    assert len(record_batch.validate_batches(batch)) == 1
    batch[-7] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        record_batch.validate_batches(batch)
