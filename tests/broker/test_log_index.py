"""OffsetIndex and TimeIndex: binary search after many appends (in memory and in the file), trim and reopen,
truncation, sanity checks, entries written in bulk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ferry.broker.log.abstract_index import WRITE_BATCH
from ferry.broker.log.offset_index import OffsetIndex
from ferry.broker.log.time_index import TimeIndex


def test_offset_index_lookups(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "00000000000000001000.index", 1000, 1 << 20)
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
    """A file with zeroed slots after its entries (what a crash left when active indexes were preallocated)
    is not trusted."""
    idx = OffsetIndex(tmp_path / "0.index", 0, 8 * 100)
    for i in range(1, 4):
        idx.append(i * 10, i * 100)
    idx.trim()
    idx.close()
    os.truncate(tmp_path / "0.index", 8 * 100)  # 100 slots, 97 of them zero
    reopened = OffsetIndex(tmp_path / "0.index", 0, 8 * 100)
    assert reopened.entries == 100
    assert reopened.sanity_check(log_size=10_000) is not None
    reopened.close()


def test_torn_index_fails_sanity(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 1 << 20)
    for i in range(1, 4):
        idx.append(i * 10, i * 100)
    idx.trim()
    with open(tmp_path / "0.index", "ab") as f:
        f.write(b"\x00\x01\x02")  # part of an entry
    again = OffsetIndex(tmp_path / "0.index", 0, 1 << 20)
    assert "not a multiple" in again.sanity_check(log_size=10_000)


def test_entries_are_written_in_bulk_and_a_crash_loses_only_pending_ones(tmp_path: Path) -> None:
    """No file access per entry: the entries go to the file WRITE_BATCH at a time (and at trim/flush); an
    index closed without trim (a crash) keeps every entry written before."""
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 1 << 20)
    for i in range(WRITE_BATCH - 1):
        idx.append(i + 1, 10 * i)
    assert path.stat().st_size == 0 and not idx.backlog
    idx.append(WRITE_BATCH, 10 * WRITE_BATCH)
    assert idx.backlog
    idx.write_pending()
    assert path.stat().st_size == WRITE_BATCH * 8 and not idx.backlog
    for i in range(10):
        idx.append(WRITE_BATCH + 1 + i, 10 * (WRITE_BATCH + 1 + i))
    idx.close()  # a crash: the 10 pending entries are gone, the file is whole entries
    again = OffsetIndex(path, 0, 1 << 20)
    assert again.entries == WRITE_BATCH and again.last_entry() == (WRITE_BATCH, 10 * WRITE_BATCH)
    assert again.sanity_check(log_size=10**6) is None


def test_lookups_and_truncation_across_file_and_memory(tmp_path: Path) -> None:
    """Entries older than the warm tail are searched in the file; truncation cuts the file or the memory."""
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 1 << 20)
    n = 3 * WRITE_BATCH + OffsetIndex.WARM_ENTRIES + 7
    for i in range(n):
        idx.append(2 * i + 1, 100 * i)
        if idx.backlog:
            idx.write_pending()
    assert idx._mem_start > 0  # the oldest entries are only in the file now
    for i in range(0, n, 13):
        assert idx.lookup(2 * i + 2) == (2 * i + 1, 100 * i)
        assert idx.lookup_position(100 * i + 50) == (2 * i + 1, 100 * i)
    assert idx.lookup(0) == (0, 0)
    idx.truncate_to(2 * (n - 3) + 1)  # inside the memory tail
    assert idx.entries == n - 3 and idx.last_entry() == (2 * (n - 4) + 1, 100 * (n - 4))
    idx.truncate_to(2 * 50 + 1)  # inside the file
    assert idx.entries == 50 and path.stat().st_size <= 50 * 8
    assert idx.last_entry() == (2 * 49 + 1, 100 * 49) and idx.lookup(2 * 30 + 1) == (2 * 30 + 1, 3000)
    idx.append(2 * 50 + 1, 5000)
    idx.trim()
    assert path.stat().st_size == 51 * 8
    again = OffsetIndex(path, 0, 1 << 20)
    assert [again.lookup(2 * i + 1) for i in (0, 25, 50)] == [(1, 0), (51, 2500), (101, 5000)]
    assert again.sanity_check(log_size=10**6) is None


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
