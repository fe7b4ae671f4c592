"""LogManager: partition directories, background flush and retention, checkpoint, dir lock."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from ferry.broker.log.log import Log
from ferry.broker.log.log_manager import CHECKPOINT_FILE, LogManager, read_checkpoint
from ferry.wire.log_config import LogConfig
from ferry.wire.record.errors import StorageError
from tests.wire.storage_batches import build_batch


def wait_for(predicate, timeout: float = 10.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_create_load_and_configs(tmp_path: Path) -> None:
    with LogManager(tmp_path, LogConfig(segment_bytes=10_000)) as m:
        a = m.get_or_create("page-views", 0)
        b = m.get_or_create("page-views", 1, {"retention.ms": "1000", "segment.bytes": "5000"})
        assert m.get_or_create("page-views", 0) is a
        assert a.config.segment_bytes == 10_000 and b.config.retention_ms == 1000
        assert b.config.segment_bytes == 5000
        a.append(build_batch(3))
        assert m.get("page-views", 0) is a and m.get("nope", 0) is None
        # a config change reaches the existing log
        assert m.get_or_create("page-views", 0, {"retention.bytes": "123"}) is a
        assert a.config.retention_bytes == 123
        with pytest.raises(ValueError, match="retention.ms"):
            m.get_or_create("page-views", 2, {"retention.ms": "x"})
        for bad in ("", "a/b", "..", "x" * 250, "sp ace"):
            with pytest.raises(ValueError):
                m.get_or_create(bad, 0)
        with pytest.raises(ValueError):
            m.get_or_create("ok", -1)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["page-views-0", "page-views-1"]
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == {("page-views", 0): 3, ("page-views", 1): 0}
    with LogManager(tmp_path) as m:
        assert set(m.all_logs()) == {("page-views", 0), ("page-views", 1)}
        assert m.get("page-views", 0).log_end_offset == 3
        # the topic configs given before the restart apply from the start
        assert m.get("page-views", 1).config.retention_ms == 1000
        assert m.get("page-views", 0).config.retention_bytes == 123


def test_data_dir_lock(tmp_path: Path) -> None:
    with LogManager(tmp_path):
        with pytest.raises(StorageError, match="in use"):
            LogManager(tmp_path)
    LogManager(tmp_path).shutdown()  # released


def test_background_flush_by_time(tmp_path: Path) -> None:
    with LogManager(tmp_path, LogConfig(flush_interval_ms=50, flush_interval_messages=10**6)) as m:
        log = m.get_or_create("t", 0)
        woke = threading.Event()
        m.add_high_watermark_listener(lambda lg: woke.set())
        m.start_background()
        start = time.monotonic()
        log.append(build_batch(5))
        assert log.high_watermark == 0
        assert woke.wait(5)
        assert log.high_watermark == 5 and time.monotonic() - start < 2


def test_background_flush_by_message_count(tmp_path: Path) -> None:
    config = LogConfig(flush_interval_ms=10**9, flush_interval_messages=20)
    with LogManager(tmp_path, config) as m:
        m.start_background()
        log = m.get_or_create("t", 0)
        log.append(build_batch(10))
        time.sleep(0.3)
        assert log.flushed_offset == 0  # neither limit reached
        log.append(build_batch(10))
        assert wait_for(lambda: log.flushed_offset == 20, 5)


def test_background_retention(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=2000, retention_ms=1000, file_delete_delay_ms=0, flush_interval_ms=10)
    with LogManager(tmp_path, config, retention_check_interval_ms=50) as m:
        log = m.get_or_create("t", 0)
        old = int(time.time() * 1000) - 10_000
        for _ in range(20):
            log.append(build_batch(3, timestamp=old))
        m.start_background()
        assert wait_for(lambda: len(log.segments) == 1 and log.log_start_offset > 0, 10)
        assert log.log_start_offset == log.segments[0].base_offset


def test_checkpoint_limits_recovery_to_unflushed_data(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=3000)
    m = LogManager(tmp_path, config)
    log = m.get_or_create("t", 0)
    for _ in range(40):
        log.append(build_batch(3))
    log.flush()
    m.checkpoint_recovery_points()
    flushed_segments = len(log.segments)
    for _ in range(20):
        log.append(build_batch(3))  # unflushed; then the process dies (no shutdown)
    end = log.log_end_offset
    new_segments = len(log.segments) - flushed_segments + 1
    assert new_segments >= 3
    os.close(m._lock_fd)  # the test plays the dead process: only its lock goes away
    m2 = LogManager(tmp_path, config)
    log2 = m2.get("t", 0)
    assert log2.log_end_offset == end
    # verified: the (then active) segment the checkpoint ended in, and the ones rolled after it
    assert log2.recovered_segments == new_segments
    m2.shutdown()
    # after a clean shutdown nothing needs verifying
    m3 = LogManager(tmp_path, config)
    assert m3.get("t", 0).recovered_segments == 0
    m3.shutdown()


def test_load_failure_is_a_clear_error(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    d.mkdir()
    (d / "00000000000000000000.log").mkdir()  # a directory where a segment file should be
    with pytest.raises(StorageError, match="t-0"):
        LogManager(tmp_path)
    # and the lock was released
    (d / "00000000000000000000.log").rmdir()
    LogManager(tmp_path).shutdown()


def test_log_manager_closes_logs(tmp_path: Path) -> None:
    m = LogManager(tmp_path)
    log: Log = m.get_or_create("t", 0)
    log.append(build_batch(2))
    m.shutdown()
    assert log.flushed_offset == 2
    with pytest.raises(StorageError):
        log.append(build_batch(1))
    with pytest.raises(StorageError):
        m.get_or_create("t", 1)
