"""DeleteRecords' storage side (broker/log/log_start.py): the log start moves to any offset up to the high
watermark, whole segments below it go, reads below it are out of range, and the start survives a re-open."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.broker.log.log import Log
from ferry.broker.log.log_start import LOG_START_FILE, delete_records_before, restore_log_start
from ferry.wire.log_config import LogConfig
from ferry.wire.record.errors import LogOffsetOutOfRangeError
from tests.wire.storage_batches import build_batch


def make_log(path: Path) -> Log:
    return Log(path, LogConfig(segment_bytes=3000, index_interval_bytes=500, file_delete_delay_ms=0))


def test_delete_records_moves_the_start_and_retires_whole_segments(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    for _ in range(30):
        log.append(build_batch(5))
    log.flush()
    segments = log.segments
    assert len(segments) > 3 and log.high_watermark == 150
    cut = segments[2].base_offset + 2  # inside the third segment
    assert delete_records_before(log, cut) == cut == log.log_start_offset
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in segments[2:]]
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == [s.log_path.name for s in log.segments]
    with pytest.raises(LogOffsetOutOfRangeError):
        log.read(cut - 1, 1 << 20)
    assert log.read(cut, 1 << 20) is not None
    assert delete_records_before(log, 3) == cut  # below the start: nothing changes
    with pytest.raises(LogOffsetOutOfRangeError):
        delete_records_before(log, log.high_watermark + 1)
    assert (tmp_path / "t-0" / LOG_START_FILE).read_text() == f"{cut}\n"
    log.close()
    reopened = make_log(tmp_path / "t-0")
    assert reopened.log_start_offset == segments[2].base_offset  # recovery alone knows segment bounds only
    assert restore_log_start(reopened) and reopened.log_start_offset == cut
    assert not restore_log_start(reopened)
    # everything up to the high watermark: only the active segment stays
    assert delete_records_before(reopened, reopened.high_watermark) == 150
    assert len(reopened.segments) == 1 and reopened.log_end_offset == 150
    reopened.append(build_batch(1))
    assert reopened.log_end_offset == 151
    reopened.close()


def test_a_saved_start_the_log_no_longer_reaches_is_ignored(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0")
    log.append(build_batch(5))
    log.close()
    (tmp_path / "t-0" / LOG_START_FILE).write_text("99\n")
    reopened = make_log(tmp_path / "t-0")
    assert not restore_log_start(reopened) and reopened.log_start_offset == 0
    (tmp_path / "t-0" / LOG_START_FILE).write_text("garbage")
    assert not restore_log_start(reopened)
    reopened.close()
