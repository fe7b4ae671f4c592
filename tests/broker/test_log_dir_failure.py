"""Disk failures in the storage layer, on a real full filesystem (a 2 MiB tmpfs) and with injected faults
where a tmpfs cannot produce them (a failed fdatasync, a torn write): KafkaStorageError (56) instead of an
unknown error, a log left consistent, the directory offline at the first IO error and back after a probe,
no SIGBUS from the indexes' mmap, and flushed_offset never past data whose fsync failed."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from disk_faults import fill, small_tmpfs

from ferry.broker.log.log import Log
from ferry.broker.log.log_manager import LogManager
from ferry.wire.log_config import LogConfig
from ferry.wire.record.errors import KafkaStorageError
from tests.wire.storage_batches import build_batch, decode

# small segments and dense indexes: a full disk hits rolls and index allocation, not only data writes
SMALL = LogConfig(segment_bytes=32 * 1024, index_interval_bytes=512, flush_interval_messages=1 << 30,
                  flush_interval_ms=1 << 30)


@pytest.fixture
def fs(tmp_path: Path):
    with small_tmpfs(tmp_path / "fs") as path:
        yield path


def on_disk(log_dir: Path) -> list[int]:
    """Base offsets of the batches in the segment files (kafka-python decodes them, every CRC checked)."""
    out = []
    for seg in sorted(log_dir.glob("*.log")):
        out += [batch.base_offset for batch, _ in decode(seg.read_bytes())]
    return out


def append_until_error(log: Log, acked: list[int], limit: int = 100_000) -> KafkaStorageError:
    for _ in range(limit):
        try:
            acked.append(log.append(build_batch(3, value_size=300)).first_offset)
        except KafkaStorageError as e:
            return e
    raise AssertionError("the filesystem never filled up")


def test_mmap_into_a_sparse_file_on_a_full_tmpfs_is_sigbus(fs: Path) -> None:
    """The hazard the index code avoids, shown for real: storing through a map into a hole of a full tmpfs."""
    code = textwrap.dedent(f"""
        import mmap, os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from disk_faults import fill
        fd = os.open({str(fs / "sparse")!r}, os.O_RDWR | os.O_CREAT)
        os.ftruncate(fd, 1 << 20)
        m = mmap.mmap(fd, 1 << 20)
        fill(__import__("pathlib").Path({str(fs)!r}))
        for i in range(0, 1 << 20, 4096):
            m[i:i + 8] = b"entry..."
        print("survived")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == -7, (r.returncode, r.stdout, r.stderr[-2000:])  # SIGBUS


def test_indexes_on_a_full_disk_give_a_storage_error_not_sigbus(fs: Path) -> None:
    """Every batch adds an offset-index entry (index.interval.bytes=0). The disk fills when the index's first
    page is full and the data file's last page still has room: the next entries go to a new index page
    (with sparse preallocation, SIGBUS: the process died) while the data still fits. The process lives, the
    append that does not fit gets KafkaStorageError and nothing of it stays on disk."""
    code = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from disk_faults import fill
        from ferry.broker.log.log import Log
        from ferry.wire.log_config import LogConfig
        from ferry.wire.record.errors import KafkaStorageError
        from tests.wire.storage_batches import build_batch
        fs = Path({str(fs)!r})
        log = Log(fs / "t-0", LogConfig(index_interval_bytes=0, max_index_bytes=1 << 20))
        seg = log.segments[-1]
        while seg.indexes.offset_index.entries < 4096 // 8:  # the next entry starts the index's second page
            log.append(build_batch(1, value_size=10))
        before = log.log_end_offset
        fill(fs)
        appended = 0
        try:
            while True:
                log.append(build_batch(1, value_size=10))
                appended += 1
        except KafkaStorageError as e:
            seg = log.segments[-1]
            print(json.dumps({{"before": before, "appended": appended, "error": str(e), "code": e.kafka_error_code,
                              "end": log.log_end_offset, "size": seg.size,
                              "file": seg.log_path.stat().st_size}}))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])  # -7 would be SIGBUS
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["code"] == 56 and "ENOSPC" in out["error"]
    assert out["appended"] > 0  # the data file's last page took a few more batches: their entries too
    assert out["end"] == out["before"] + out["appended"] and out["file"] == out["size"]


def test_append_on_a_full_disk_is_a_storage_error_and_leaves_the_log_consistent(fs: Path) -> None:
    ballast = fs / "ballast"
    ballast.write_bytes(bytes(256 * 1024))
    log = Log(fs / "t-0", SMALL)
    acked: list[int] = []
    err = append_until_error(log, acked)
    assert err.kafka_error_code == 56 and "ENOSPC" in str(err)
    assert log.offline and len(acked) > 10
    end = log.log_end_offset
    assert end == acked[-1] + 3
    for seg in log.segments:  # no torn batch behind the last good one
        assert seg.log_path.stat().st_size == seg.size
    # offline: nothing touches the files any more, every call says so
    for call in (lambda: log.append(build_batch(1)), log.flush, lambda: log.read(0, 1 << 20)):
        with pytest.raises(KafkaStorageError):
            call()
    assert log.flushed_offset < end  # the flush interval was never reached and a flush is refused now
    log.close()
    ballast.unlink()
    again = Log(fs / "t-0", SMALL)
    assert again.log_end_offset == end and not again.offline
    assert on_disk(again.dir) == acked
    again.append(build_batch(1))
    again.close()


def test_a_torn_write_is_cut_back_to_the_last_whole_batch(tmp_path: Path, monkeypatch) -> None:
    """A write that gets half way and fails (EIO): the half is cut off, the log is offline, a re-open finds
    exactly the batches acknowledged before."""
    log = Log(tmp_path / "t-0", SMALL)
    acked = [log.append(build_batch(5)).first_offset for _ in range(4)]
    real = os.pwritev

    def torn(fd: int, buffers: list, position: int) -> int:
        data = b"".join(bytes(b) for b in buffers)
        os.pwrite(fd, data[: len(data) // 2], position)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pwritev", torn)
    with pytest.raises(KafkaStorageError, match="EIO"):
        log.append(build_batch(5))
    monkeypatch.setattr(os, "pwritev", real)
    seg = log.segments[-1]
    assert seg.log_path.stat().st_size == seg.size and log.log_end_offset == 20
    log.close()
    again = Log(tmp_path / "t-0", SMALL)
    assert on_disk(again.dir) == acked and again.log_end_offset == 20
    again.close()


def test_a_failed_fdatasync_never_lets_flushed_offset_pass_that_data(tmp_path: Path, monkeypatch) -> None:
    """Linux may drop the pages whose write-back failed and report the next fsync as a success: a flush
    after a failed one must not call the data durable. The log goes offline instead (Kafka's rule)."""
    log = Log(tmp_path / "t-0", SMALL)
    log.append(build_batch(5))
    assert log.flush() == 5
    log.append(build_batch(5))
    real = os.fdatasync
    failures = []

    def failing(fd: int) -> None:
        failures.append(fd)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(KafkaStorageError, match="EIO"):
        log.flush()
    monkeypatch.setattr(os, "fdatasync", real)  # the device "works" again: fsync would now succeed
    assert failures and log.offline
    for _ in range(3):
        with pytest.raises(KafkaStorageError):
            log.flush()
        assert not log.maybe_flush()
    assert log.flushed_offset == 5 and log.high_watermark == 5  # consumers never see the unsynced batch
    with pytest.raises(KafkaStorageError):
        log.append(build_batch(1))
    log.close()
    # only a new open, which verifies what the disk holds after the recovery point, calls it durable
    again = Log(tmp_path / "t-0", SMALL, recovery_point=5)
    assert again.recovered_segments >= 1 and again.log_end_offset == 10 and again.flushed_offset == 10
    again.close()


def test_follower_append_on_a_full_disk(fs: Path, tmp_path: Path) -> None:
    leader = Log(tmp_path / "leader-0", SMALL)
    for _ in range(400):
        leader.append(build_batch(3, value_size=300), leader_epoch=1)
    follower = Log(fs / "t-0", SMALL)
    fill(fs)
    with pytest.raises(KafkaStorageError):
        while follower.log_end_offset < leader.log_end_offset:
            sl = leader.read(follower.log_end_offset, 8192, upper_bound=leader.log_end_offset)
            follower.append_as_follower(sl.read_bytes())
    end = follower.log_end_offset
    assert follower.offline and end < leader.log_end_offset
    for seg in follower.segments:
        assert seg.log_path.stat().st_size == seg.size
    follower.close()
    (fs / "filler").unlink()
    again = Log(fs / "t-0", SMALL)
    assert again.log_end_offset == end and on_disk(again.dir) == on_disk(leader.dir)[: len(on_disk(again.dir))]
    again.close()
    leader.close()


def test_log_manager_takes_the_dir_offline_once_and_brings_it_back(fs: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="ferry.log")
    lm = LogManager(fs / "data", SMALL)
    events: list[str] = []
    lm.add_dir_failure_listener(lambda d, reason: events.append(reason))
    a = lm.get_or_create("a", 0)
    b = lm.get_or_create("b", 0)
    b.append(build_batch(2))
    sending = b.read(0, 1 << 20, upper_bound=2)  # a fetch answered before the failure, still being sent
    acked: list[int] = []
    filler = fill(fs)
    err = append_until_error(a, acked)
    assert lm.offline and lm.health.offline_log_dirs == 1 and a.offline and b.offline
    assert "ENOSPC" in str(err) and len(events) == 1 and "ENOSPC" in events[0]
    for _ in range(5):  # more requests, background passes: still one line, one event
        for lg in (a, b):
            with pytest.raises(KafkaStorageError):
                lg.append(build_batch(1))
        lm.flush_pass()
        lm.retention_pass()
        lm.checkpoint_recovery_points()
    with pytest.raises(KafkaStorageError):
        lm.get_or_create("c", 0)
    offline_lines = [r for r in caplog.records if "is offline" in r.getMessage()]
    assert len(offline_lines) == 1 and offline_lines[0].exc_info is None and len(events) == 1
    assert not lm.probe()
    filler.unlink()
    assert lm.probe()
    end_a = a.log_end_offset
    assert lm.reopen() == 2
    assert not lm.offline and lm.health.offline_log_dirs == 0
    a2, b2 = lm.get("a", 0), lm.get("b", 0)
    assert a2 is not a and a2.log_end_offset == end_a and b2.log_end_offset == 2
    assert on_disk(a2.dir) == acked
    assert a2.append(build_batch(1)).first_offset == end_a
    assert [r.offset for _, rs in decode(sending.read_bytes()) for r in rs] == [0, 1]  # its fd is still open
    assert len([r for r in caplog.records if "back online" in r.getMessage()]) == 1
    lm.shutdown()


def test_a_failed_checkpoint_takes_the_dir_offline(tmp_path: Path, monkeypatch) -> None:
    import ferry.broker.log.log_manager as log_manager

    lm = LogManager(tmp_path / "data", SMALL)
    lg = lm.get_or_create("a", 0)
    lg.append(build_batch(2))
    lg.flush()

    def no_space(path: Path, offsets: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(log_manager, "write_checkpoint", no_space)
    lm.checkpoint_recovery_points()
    assert lm.offline and lg.offline and "checkpoint" in lm.health.offline_reason
    monkeypatch.undo()
    assert lm.probe() and lm.reopen() == 1 and lm.get("a", 0).log_end_offset == 2
    lm.shutdown()


def test_a_failed_leader_epoch_checkpoint_is_the_dirs_failure(tmp_path: Path, monkeypatch) -> None:
    """A new leader writes its epoch before any data of it: when that write fails, the caller (the replica
    manager, outside the log) gets KafkaStorageError as for any other IO error, and the log is offline."""
    import ferry.broker.log.leader_epoch_cache as epoch_cache

    log = Log(tmp_path / "t-0", SMALL)
    log.append(build_batch(2), leader_epoch=0)

    def no_space(path: Path, entries: object, durable: bool = True) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(epoch_cache, "write_epoch_checkpoint", no_space)
    with pytest.raises(KafkaStorageError, match="leader epoch checkpoint"):
        log.leader_epoch_cache.assign(1, log.log_end_offset)
    assert log.offline and log.leader_epoch_cache.latest_epoch == 0
    with pytest.raises(KafkaStorageError):
        log.append(build_batch(1), leader_epoch=1)
    monkeypatch.undo()
    log.close()
