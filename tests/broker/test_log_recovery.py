"""Recovery at open: torn or corrupt tails are truncated and reported, indexes are rebuilt,
nothing flushed is lost (including after a real kill -9)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from ferry.broker.log.log import Log
from ferry.wire.log_config import LogConfig
from tests.wire.storage_batches import CODECS, build_batch, decode

CONFIG = LogConfig(segment_bytes=6000, index_interval_bytes=400)


def fill(path: Path, batches: int = 60, config: LogConfig = CONFIG) -> Log:
    log = Log(path, config)
    for i in range(batches):
        log.append(build_batch(1 + i % 4, codec=CODECS["gzip"] if i % 5 == 0 else 0))
    log.flush()
    return log


def offsets_readable(log: Log) -> list[int]:
    out: list[int] = []
    offset = log.log_start_offset
    while True:
        fs = log.read(offset, 1 << 20)
        if fs is None:
            return out
        batches = list(decode(fs.read_bytes()))
        for _, records in batches:
            out.extend(r.offset for r in records)
        offset = batches[-1][0].next_offset


def last_segment_path(log: Log) -> Path:
    return log.segments[-1].log_path


def test_garbage_appended_is_truncated_and_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = fill(tmp_path / "t-0")
    end = log.log_end_offset
    path = last_segment_path(log)
    log.close()
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(os.urandom(777))
    with caplog.at_level(logging.WARNING, logger="ferry.log"):
        log = Log(tmp_path / "t-0", CONFIG)
    assert path.stat().st_size == size
    assert any("truncated 777 bytes" in r.getMessage() and r.name == "ferry.log" for r in caplog.records)
    assert log.log_end_offset == end
    assert offsets_readable(log) == list(range(end))
    assert log.append(build_batch(2)).first_offset == end
    log.close()


def test_half_written_batch_is_truncated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = fill(tmp_path / "t-0")
    end = log.log_end_offset
    log.append(build_batch(5, value_size=300))
    path = last_segment_path(log)
    log.close()
    full = path.stat().st_size
    torn = full - 700  # the last batch is ~1.6 KB: cut it in the middle
    os.truncate(path, torn)
    with caplog.at_level(logging.WARNING, logger="ferry.log"):
        log = Log(tmp_path / "t-0", CONFIG)
    lost = torn - path.stat().st_size
    assert 0 < lost < 5 * 300 + 200
    assert any(f"truncated {lost} bytes" in r.getMessage() for r in caplog.records)
    assert log.log_end_offset == end
    assert offsets_readable(log) == list(range(end))
    log.close()


def test_corrupt_last_batch_is_dropped(tmp_path: Path) -> None:
    log = fill(tmp_path / "t-0")
    end = log.log_end_offset
    log.append(build_batch(3))
    path = last_segment_path(log)
    log.close()
    with open(path, "r+b") as f:
        f.seek(-10, os.SEEK_END)
        byte = f.read(1)
        f.seek(-10, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x55]))
    log = Log(tmp_path / "t-0", CONFIG)
    assert log.log_end_offset == end
    on_disk = [r.offset for p in sorted(path.parent.glob("*.log")) for _, rs in decode(p.read_bytes()) for r in rs]
    assert on_disk == list(range(end))
    log.close()


def test_corruption_in_an_earlier_segment_drops_what_follows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = fill(tmp_path / "t-0", batches=120)
    segments = log.segments
    assert len(segments) >= 3
    victim = segments[1]
    victim_path = victim.log_path
    header = victim.read_header(0)
    assert header is not None
    second_batch = header.size
    log.close()
    with open(victim_path, "r+b") as f:
        f.seek(second_batch + 70)  # inside the second batch, past its header
        b = f.read(1)
        f.seek(second_batch + 70)
        f.write(bytes([b[0] ^ 1]))
    with caplog.at_level(logging.WARNING, logger="ferry.log"):
        log = Log(tmp_path / "t-0", CONFIG, recovery_point=0)  # nothing known flushed: verify all
    assert log.log_end_offset == header.next_offset
    assert len(log.segments) == 2
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == [
        s.log_path.name for s in log.segments
    ]
    assert any("CRC" in r.getMessage() for r in caplog.records)
    assert offsets_readable(log) == list(range(header.next_offset))
    log.close()


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate"])
def test_indexes_rebuilt(tmp_path: Path, damage: str) -> None:
    base = 1_600_000_000_000
    log = Log(tmp_path / "t-0", CONFIG)
    for i in range(150):
        log.append(build_batch(2, timestamp=base + i))
    log.close()
    end = log.log_end_offset
    for path in (tmp_path / "t-0").glob("*index"):
        if damage == "delete":
            path.unlink()
        elif damage == "garbage":
            path.write_bytes(os.urandom(path.stat().st_size or 24))
        else:
            os.truncate(path, max(0, path.stat().st_size - 5))
    # recovery_point = log end: only index damage can trigger a rebuild here
    log = Log(tmp_path / "t-0", CONFIG, recovery_point=end)
    assert log.log_end_offset == end
    assert offsets_readable(log) == list(range(end))
    for offset in range(0, end, 13):
        fs = log.read(offset, 1)
        assert fs is not None and fs.first_offset == offset - offset % 2
    assert log.offset_for_timestamp(base + 100) == (200, base + 100)
    log.close()
    for seg_log in (tmp_path / "t-0").glob("*.log"):
        if seg_log.stat().st_size > CONFIG.index_interval_bytes * 2:
            assert seg_log.with_suffix(".index").stat().st_size > 0
            assert seg_log.with_suffix(".timeindex").stat().st_size > 0


def test_unclean_shutdown_keeps_everything(tmp_path: Path) -> None:
    log = fill(tmp_path / "t-0")
    log.append(build_batch(3))  # unflushed, but in the page cache: a process crash keeps it
    end = log.log_end_offset
    # no close(): indexes stay preallocated, no producer snapshot
    again = Log(tmp_path / "t-0", CONFIG)
    assert again.log_end_offset == end
    assert offsets_readable(again) == list(range(end))
    again.close()


def test_stray_files_are_cleaned(tmp_path: Path) -> None:
    log = fill(tmp_path / "t-0")
    log.close()
    d = tmp_path / "t-0"
    (d / "00000000000000099999.index").write_bytes(b"\x00" * 8)
    (d / "00000000000000000000.log.deleted").write_bytes(b"old")
    (d / "producer-state.snapshot.tmp").write_bytes(b"{")
    log = Log(d, CONFIG)
    assert not (d / "00000000000000099999.index").exists()
    assert not (d / "00000000000000000000.log.deleted").exists()
    assert not (d / "producer-state.snapshot.tmp").exists()
    log.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = [{root!r}, {tests!r}]
    from storage_batches import build_batch
    from ferry.broker.log.log import Log
    from ferry.wire.log_config import LogConfig
    log = Log({path!r}, LogConfig(segment_bytes=20000, index_interval_bytes=500))
    i = 0
    while True:
        info = log.append(build_batch(1 + i % 3, value_size=150))
        log.flush(info.last_offset + 1)          # acks=-1: fsync'd before the answer
        print(info.last_offset, flush=True)
        log.append(build_batch(2, value_size=150))  # never acknowledged
        i += 1
    """
)


def test_kill_9_during_acked_production(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    root = str(Path(__file__).resolve().parents[2])
    script = CHILD.format(root=root, tests=str(Path(__file__).resolve().parents[1] / "wire"), path=str(path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    acked = -1
    deadline = time.monotonic() + 60
    try:
        assert proc.stdout is not None
        while acked < 300 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked = int(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert acked >= 300, "the child did not acknowledge enough batches in time"
    # and a torn write at the very end, as a power cut mid-write would leave
    last = sorted(path.glob("*.log"))[-1]
    with open(last, "ab") as f:
        f.write(build_batch(4)[:-30])
    log = Log(path, LogConfig(segment_bytes=20000, index_interval_bytes=500))
    assert log.log_end_offset > acked
    offsets = offsets_readable(log)
    assert offsets == list(range(log.log_end_offset))
    all_on_disk = [r.offset for p in sorted(path.glob("*.log")) for _, rs in decode(p.read_bytes()) for r in rs]
    assert all_on_disk == offsets
    for p in path.glob("*.log"):  # no partial batch left anywhere
        data = p.read_bytes()
        assert MemoryRecords(data).valid_bytes() == len(data)
    log.close()
