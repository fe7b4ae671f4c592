"""Transactions in one partition's log (no processes): open transactions hold back the last stable offset,
markers close them, aborted transactions are listed for the fetched range, and all of it survives a clean
close (snapshot), a crash (rebuilt from the log), replication to a follower and retention."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.broker.log.log import Log
from ferry.broker.log.log_transactions import MARKER
from ferry.broker.log.producer_state import SNAPSHOT_FILE
from ferry.wire.log_config import LogConfig
from ferry.wire.record.control_batch import ABORT, COMMIT, build_marker, control_type
from ferry.wire.record.errors import InvalidProducerEpochError, InvalidRecordError
from ferry.wire.record.record_batch import TRANSACTIONAL_MASK, validate_batches
from tests.wire.storage_batches import build_batch, decode


def txn(pid: int, seq: int, count: int = 3, epoch: int = 0) -> bytes:
    return build_batch(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)


@pytest.fixture
def cfg() -> LogConfig:
    return LogConfig(segment_bytes=4000, index_interval_bytes=200, consumers_see_unflushed=True)


def _history(log: Log) -> None:
    """pid 1 commits [0-2] (marker 3); pid 2 opens at 4, pid 1 aborts [5-7] (marker 8); pid 2 writes [9-11]."""
    log.append(txn(1, 0), allow=TRANSACTIONAL_MASK)
    log.append_marker(1, 0, committed=True)
    log.append(txn(2, 0, 1), allow=TRANSACTIONAL_MASK)
    log.append(txn(1, 3), allow=TRANSACTIONAL_MASK)
    log.append_marker(1, 0, committed=False)
    log.append(txn(2, 1), allow=TRANSACTIONAL_MASK)


def _state(log: Log) -> tuple:
    s = log.producer_state
    return dict(s.ongoing), list(s.aborted), log.last_stable_offset, log.aborted_transactions(0, log.log_end_offset)


def test_markers_close_transactions_and_the_lso_follows_the_earliest_open_one(tmp_path: Path, cfg: LogConfig):
    log = Log(tmp_path / "t-0", cfg)
    _history(log)
    assert log.log_end_offset == 12 and log.high_watermark == 12
    assert log.producer_state.ongoing == {2: 4}
    assert log.last_stable_offset == 4  # pid 2's transaction is still open
    assert log.aborted_transactions(0, 12) == [(1, 5)]
    assert log.aborted_transactions(9, 12) == []  # the aborted one ended at its marker (8)
    assert log.aborted_transactions(0, 5) == []  # and began at 5
    log.append_marker(2, 0, committed=True)
    assert log.last_stable_offset == log.log_end_offset == 13
    batches = [(b.base_offset, b.is_control_batch) for b, _ in decode(log.read(0, 1 << 20).read_bytes())]
    assert [o for o, control in batches if control] == [3, 8, 12]
    log.close()


def test_marker_above_the_high_watermark_keeps_the_transaction_unstable(tmp_path: Path):
    log = Log(tmp_path / "t-0", LogConfig())  # consumers see flushed data only: the HW is the flushed offset
    log.append(txn(1, 0), allow=TRANSACTIONAL_MASK)
    log.flush()
    log.append_marker(1, 0, committed=False)
    assert log.high_watermark == 3 and log.last_stable_offset == 0  # decided, but the marker is not readable
    log.flush()
    assert log.last_stable_offset == log.high_watermark == 4
    log.close()


def test_state_survives_a_clean_close_and_a_crash(tmp_path: Path, cfg: LogConfig):
    log = Log(tmp_path / "t-0", cfg)
    _history(log)
    before = _state(log)
    log.close()  # writes the snapshot
    assert (tmp_path / "t-0" / SNAPSHOT_FILE).exists()
    again = Log(tmp_path / "t-0", cfg)
    assert _state(again) == before
    again.close()
    (tmp_path / "t-0" / SNAPSHOT_FILE).unlink()  # as after kill -9: everything from the batches on disk
    rebuilt = Log(tmp_path / "t-0", cfg)
    assert _state(rebuilt) == before
    rebuilt.append_marker(2, 0, committed=False)
    assert rebuilt.aborted_transactions(0, 13) == [(1, 5), (2, 4)]
    rebuilt.close()


def test_a_follower_copies_markers_and_knows_the_same_transactions(tmp_path: Path, cfg: LogConfig):
    leader = Log(tmp_path / "l" / "t-0", cfg)
    _history(leader)
    follower = Log(tmp_path / "f" / "t-0", cfg)
    follower.append_as_follower(leader.read(0, 1 << 20, upper_bound=leader.log_end_offset).read_bytes())
    assert _state(follower) == _state(leader)
    leader.close()
    follower.close()


def test_clients_may_not_send_markers_and_transactional_batches_need_a_transactional_id(tmp_path, cfg):
    log = Log(tmp_path / "t-0", cfg)
    with pytest.raises(InvalidRecordError, match="control"):
        log.append(build_marker(1, 0, True), allow=TRANSACTIONAL_MASK)
    with pytest.raises(InvalidRecordError, match="transactional"):
        log.append(txn(1, 0))
    assert log.log_end_offset == 0
    log.append(txn(1, 0, epoch=2), allow=TRANSACTIONAL_MASK)
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(1, 1, committed=False)  # a marker of a fenced epoch
    log.append_marker(1, 3, committed=False)  # a fencing abort: a newer epoch
    with pytest.raises(InvalidProducerEpochError):
        log.append(txn(1, 3, epoch=2), allow=TRANSACTIONAL_MASK)  # the zombie's next batch
    assert log.last_stable_offset == log.log_end_offset
    log.close()


def test_marker_bytes():
    m = build_marker(7, 3, committed=False, coordinator_epoch=5, timestamp_ms=1_000)
    (h,) = validate_batches(m, allow=MARKER)
    assert h.is_control and h.is_transactional and (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 3, -1)
    assert control_type(m) == ABORT and control_type(build_marker(7, 3, True)) == COMMIT
    ((batch, records),) = list(decode(m))
    assert batch.is_control_batch and records[0].key == b"\x00\x00\x00\x00"
    assert records[0].value == b"\x00\x00\x00\x00\x00\x05"
