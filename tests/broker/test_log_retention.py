"""Retention by time and by size: whole segments go, the log start offset moves, reads below
it get OFFSET_OUT_OF_RANGE, the active segment and unflushed data stay."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ferry.broker.log.log import Log
from ferry.wire.log_config import LogConfig
from ferry.wire.record.errors import LogOffsetOutOfRangeError
from tests.wire.storage_batches import build_batch, decode

HOUR = 3600 * 1000
NOW = 1_700_000_000_000


def make_log(path: Path, **overrides: int) -> tuple[Log, list[int]]:
    now = [NOW]
    config = LogConfig(segment_bytes=3000, index_interval_bytes=500, file_delete_delay_ms=0, **overrides)
    return Log(path, config, now_ms=lambda: now[0]), now


def test_retention_by_time(tmp_path: Path) -> None:
    log, now = make_log(tmp_path / "t-0", retention_ms=10 * HOUR)
    # 24 hours of data, one batch per hour
    for h in range(24):
        log.append(build_batch(5, timestamp=NOW - (24 - h) * HOUR))
    log.flush()
    before = [(s.base_offset, s.max_timestamp) for s in log.segments]
    assert len(before) > 4
    deleted = log.delete_retained()
    expected_gone = [b for b, ts in before[:-1] if NOW - ts > 10 * HOUR]
    assert deleted == len(expected_gone) > 0
    remaining = log.segments
    assert remaining[0].base_offset == before[deleted][0] == log.log_start_offset
    assert all(NOW - s.max_timestamp <= 10 * HOUR for s in remaining[:-1])
    # whole segments: the files are gone, the rest untouched
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names == [s.log_path.name for s in remaining]
    with pytest.raises(LogOffsetOutOfRangeError):
        log.read(log.log_start_offset - 1, 1 << 20)
    fs = log.read(log.log_start_offset, 1 << 20)
    assert fs is not None and fs.first_offset == log.log_start_offset
    assert log.delete_retained() == 0
    # much later everything but the active segment goes
    now[0] += 100 * HOUR
    log.delete_retained()
    assert len(log.segments) == 1 and log.log_start_offset == log.segments[0].base_offset
    log.close()
    # the start offset survives a restart
    again = Log(tmp_path / "t-0", LogConfig(segment_bytes=3000))
    assert again.log_start_offset == log.log_start_offset and again.log_end_offset == log.log_end_offset
    again.close()


def test_retention_by_size(tmp_path: Path) -> None:
    log, _ = make_log(tmp_path / "t-0", retention_bytes=7000, retention_ms=-1)
    for _ in range(60):
        log.append(build_batch(3))
    log.flush()
    total_before = log.size_in_bytes
    assert total_before > 20_000
    deleted = log.delete_retained()
    assert deleted > 0
    sizes = [s.size for s in log.segments]
    # the smallest suffix of segments >= 7000 bytes minus nothing more: removing the oldest
    # remaining segment would go below the limit
    assert sum(sizes) - sizes[0] < 7000 <= sum(sizes) or len(sizes) == 1
    assert log.log_start_offset == log.segments[0].base_offset
    offsets = []
    offset = log.log_start_offset
    while (fs := log.read(offset, 1 << 20)) is not None:
        batches = list(decode(fs.read_bytes()))
        offsets.extend(r.offset for _, rs in batches for r in rs)
        offset = batches[-1][0].next_offset
    assert offsets == list(range(log.log_start_offset, log.log_end_offset))
    log.close()


def test_retention_never_deletes_active_or_unflushed(tmp_path: Path) -> None:
    log, now = make_log(tmp_path / "t-0", retention_ms=1)
    for _ in range(30):
        log.append(build_batch(3, timestamp=NOW - HOUR))
    assert len(log.segments) > 2
    assert log.delete_retained() == 0  # nothing flushed yet
    log.flush()
    count = len(log.segments)
    assert log.delete_retained() == count - 1
    assert len(log.segments) == 1 and log.segments[0].size > 0
    log.close()


def test_deleted_segment_stays_readable_during_the_delay(tmp_path: Path) -> None:
    now = [NOW]
    config = LogConfig(segment_bytes=3000, retention_ms=HOUR, file_delete_delay_ms=60_000)
    log = Log(tmp_path / "t-0", config, now_ms=lambda: now[0])
    for _ in range(20):
        log.append(build_batch(3, timestamp=NOW - 2 * HOUR))
    log.flush()
    fs = log.read(0, 1 << 20)
    assert fs is not None
    assert log.delete_retained() > 0
    d = tmp_path / "t-0"
    assert list(d.glob("*.deleted"))
    assert not (d / "00000000000000000000.log").exists()
    # an in-flight sendfile still works on the renamed file
    assert os.pread(fs.fd, fs.size, fs.position) == fs.read_bytes() and len(fs.read_bytes()) == fs.size
    now[0] += 61_000
    log.delete_retained()
    assert not list(d.glob("*.deleted"))
    log.close()


def test_retention_disabled(tmp_path: Path) -> None:
    log, _ = make_log(tmp_path / "t-0", retention_ms=-1, retention_bytes=-1)
    for _ in range(30):
        log.append(build_batch(3, timestamp=1))
    log.flush()
    assert log.delete_retained() == 0 and log.log_start_offset == 0
    log.close()
