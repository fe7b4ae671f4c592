"""OffsetIndex and TimeIndex: binary search after many appends, trim and reopen, sanity checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.broker.log.offset_index import OffsetIndex
from ferry.broker.log.time_index import TimeIndex


def test_offset_index_lookups(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "00000000000000001000.index", 1000, 1 << 20)
    idx.make_writable()
    for i in range(5000):
        idx.append(1000 + 3 * i, 100 * i)
    assert idx.entries == 5000
    assert idx.lookup(999) == (1000, 0)
    assert idx.lookup(1000) == (1000, 0)
    assert idx.lookup(1001) == (1000, 0)
    assert idx.lookup(1000 + 3 * 2500 + 2) == (1000 + 3 * 2500, 250000)
    assert idx.lookup(10**9) == (1000 + 3 * 4999, 499900)
    assert idx.lookup_position(250050) == (1000 + 3 * 2500, 250000)
    assert idx.lookup_position(-1) == (1000, 0)
    for i in range(0, 5000, 97):
        assert idx.lookup(1000 + 3 * i + 1) == (1000 + 3 * i, 100 * i)
    with pytest.raises(ValueError):
        idx.append(1000, 10**6)  # offsets must grow
    idx.trim()
    idx.close()
    assert (tmp_path / "00000000000000001000.index").stat().st_size == 5000 * 8

    again = OffsetIndex(tmp_path / "00000000000000001000.index", 1000, 1 << 20)
    assert again.entries == 5000
    assert again.lookup(1000 + 3 * 4000) == (1000 + 3 * 4000, 400000)
    assert again.sanity_check(log_size=500000) is None
    assert "beyond the log size" in again.sanity_check(log_size=1000)
    again.close()


def test_preallocated_index_left_by_a_crash_fails_sanity(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 8 * 100)
    idx.make_writable()
    for i in range(1, 4):
        idx.append(i * 10, i * 100)
    idx.close()  # not trimmed: 100 slots, 97 of them zero
    reopened = OffsetIndex(tmp_path / "0.index", 0, 8 * 100)
    assert reopened.entries == 100
    assert reopened.sanity_check(log_size=10_000) is not None
    reopened.close()


def test_index_full(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 8 * 3)
    for i in range(3):
        idx.append(i, i)
    assert idx.is_full
    with pytest.raises(IndexError):
        idx.append(10, 10)
    idx.close()


def test_time_index(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "00000000000000000500.timeindex", 500, 1 << 20)
    assert idx.last_entry() == (-1, 500)
    assert idx.lookup(123) == (-1, 500)
    for i in range(1000):
        assert idx.maybe_append(10_000 + 10 * i, 500 + 2 * i)
    assert not idx.maybe_append(10_000, 5000)  # not larger: skipped
    assert idx.lookup(9_999) == (-1, 500)
    assert idx.lookup(10_000) == (10_000, 500)
    assert idx.lookup(10_015) == (10_010, 502)
    assert idx.lookup(10**12) == (10_000 + 9990, 500 + 1998)
    assert idx.last_entry() == (19_990, 2498)
    idx.trim()
    idx.close()
    again = TimeIndex(tmp_path / "00000000000000000500.timeindex", 500, 1 << 20)
    assert again.entries == 1000
    assert again.sanity_check(max_offset=2498) is None
    assert again.sanity_check(max_offset=1000) is not None
    again.close()
