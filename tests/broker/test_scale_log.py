"""The storage side of many partitions (issue 20): no open file or memory map per index, no fsync to create a
log, leader-epoch checkpoints made durable by the log's flush and re-learnt from the batches after a crash."""

from __future__ import annotations

import os
from pathlib import Path

from ferry.broker.log.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE, EpochEntry
from ferry.broker.log.log import Log
from ferry.wire.log_config import LogConfig
from tests.wire.storage_batches import build_batch


def _open_files_under(path: Path) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(str(path))
        except OSError:
            pass
    return n


def _maps_under(path: Path) -> int:
    with open("/proc/self/maps") as f:
        return sum(str(path) in line for line in f)


def test_a_log_keeps_one_open_file_and_no_map_per_segment(tmp_path: Path, monkeypatch) -> None:
    fsyncs: list[int] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(os, "fdatasync", lambda fd: (fsyncs.append(fd), real_fdatasync(fd))[1])
    logs = [Log(tmp_path / f"t-{p}", LogConfig(index_interval_bytes=0)) for p in range(50)]
    assert fsyncs == []  # creating a log makes nothing durable yet: its first flush does
    for lg in logs:
        lg.append(build_batch(3), leader_epoch=0)
    assert _open_files_under(tmp_path) == 50 and _maps_under(tmp_path) == 0
    for lg in logs:
        lg.close()


def test_epochs_lost_with_an_unsynced_checkpoint_are_learnt_again_from_the_batches(tmp_path: Path) -> None:
    lg = Log(tmp_path / "t-0", LogConfig())
    lg.append(build_batch(2), leader_epoch=1)
    lg.flush()
    lg.append(build_batch(2), leader_epoch=4)  # epoch 4's checkpoint is written, not yet fsynced
    checkpoint = lg.dir / LEADER_EPOCH_CHECKPOINT_FILE
    assert checkpoint.read_text().split() == ["0", "2", "1", "0", "4", "2"]
    # a power loss that kept epoch 4's data (the kernel wrote it back) but not the checkpoint's new version
    checkpoint.write_text("0\n1\n1 0\n")
    again = Log(tmp_path / "t-0", LogConfig(), recovery_point=2)  # the crashed object is simply abandoned
    assert again.recovered_segments == 1 and again.log_end_offset == 4
    assert again.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(4, 2)]
    assert again.leader_epoch_cache.end_offset_for(1, again.log_end_offset) == (1, 2)
    again.close()
    lg.close()
