"""Idempotent producers: a retried batch is never appended twice, gaps and fenced epochs are
refused, and the state survives a clean close and a crash."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ferry.broker.log.log import Log
from ferry.broker.log.producer_state import SNAPSHOT_FILE
from ferry.wire.log_config import LogConfig
from ferry.wire.record.errors import InvalidProducerEpochError, OutOfOrderSequenceError, RecordTooLargeError
from tests.wire.storage_batches import build_batch, decode

PID = 4242


def pbatch(seq: int, count: int = 3, epoch: int = 0, pid: int = PID) -> bytes:
    return build_batch(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def records_on_disk(log: Log) -> list[int]:
    return [r.offset for p in sorted(log.dir.glob("*.log")) for _, rs in decode(p.read_bytes()) for r in rs]


def test_retry_is_not_appended_twice(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    first = pbatch(0)
    a = log.append(first)
    b = log.append(pbatch(3))
    assert (a.first_offset, a.last_offset, b.first_offset) == (0, 2, 3)
    again = log.append(first)  # the producer never saw the answer and retries
    assert (again.first_offset, again.last_offset, again.duplicate) == (0, 2, True)
    assert log.log_end_offset == 6
    assert log.append(pbatch(3)).duplicate
    assert log.append(pbatch(6)).first_offset == 6
    assert records_on_disk(log) == list(range(9))
    log.close()


def test_sequence_gap_refused(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    log.append(pbatch(0))
    with pytest.raises(OutOfOrderSequenceError) as exc:
        log.append(pbatch(5))
    assert exc.value.kafka_error_code == 45
    assert log.log_end_offset == 3
    log.append(pbatch(3))
    log.close()


def test_old_duplicate_outside_the_window(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    for i in range(7):
        log.append(pbatch(3 * i))
    # the last five are remembered
    assert log.append(pbatch(6)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(0))
    log.close()


def test_epochs(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    log.append(pbatch(0, epoch=1))
    log.append(pbatch(3, epoch=1))
    with pytest.raises(InvalidProducerEpochError) as exc:
        log.append(pbatch(6, epoch=0))
    assert exc.value.kafka_error_code == 47
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(6, epoch=2))  # a new epoch starts at sequence 0
    info = log.append(pbatch(0, epoch=2))
    assert info.first_offset == 6 and not info.duplicate
    with pytest.raises(InvalidProducerEpochError):
        log.append(pbatch(3, epoch=1))
    log.close()


def test_producers_are_independent_and_non_idempotent_batches_pass(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    log.append(pbatch(0, pid=1))
    log.append(pbatch(0, pid=2))
    same = build_batch(2)
    log.append(same)
    assert not log.append(same).duplicate  # no producer id: no idempotence
    assert log.append(pbatch(0, pid=1)).duplicate
    assert log.log_end_offset == 10
    log.close()


def test_unknown_producer_may_start_anywhere(tmp_path: Path) -> None:
    # e.g. its earlier batches were removed by retention (Kafka accepts this since KIP-360)
    log = Log(tmp_path / "t-0")
    assert log.append(pbatch(500)).first_offset == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(504))
    log.close()


def test_sequence_wraps(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    log.append(pbatch(0x7FFFFFFF - 2, count=3))
    assert log.append(pbatch(0, count=2)).first_offset == 3
    log.close()


def test_several_batches_of_one_producer_in_one_payload(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    log.append(pbatch(0) + pbatch(3))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(6) + pbatch(10))
    assert log.log_end_offset == 6
    assert log.append(pbatch(3)).duplicate
    log.close()


@pytest.mark.parametrize("how", ["clean close", "crash", "snapshot then crash", "stale snapshot"])
def test_state_survives_reopen(tmp_path: Path, how: str) -> None:
    config = LogConfig(segment_bytes=3000)
    log = Log(tmp_path / "t-0", config)
    for i in range(10):
        log.append(pbatch(3 * i))
    if how in ("snapshot then crash", "stale snapshot"):
        assert log.snapshot_producer_state()
        assert not log.snapshot_producer_state()  # unchanged: not written again
    if how == "stale snapshot":
        # a snapshot claiming more than the log holds (data lost in a crash) must be ignored:
        # used, it would miss the ten batches below and pbatch(57) would not be a duplicate
        snap = tmp_path / "t-0" / SNAPSHOT_FILE
        snap.write_text(snap.read_text().replace(f'"offset": {log.log_end_offset}', '"offset": 999999'))
        assert "999999" in snap.read_text()
    for i in range(10, 20):
        log.append(pbatch(3 * i))
    log.append(pbatch(0, pid=7, epoch=3))
    end = log.log_end_offset
    if how == "clean close":
        log.close()
        assert (tmp_path / "t-0" / SNAPSHOT_FILE).exists()
    else:
        log.flush()  # then the process dies: state comes from the snapshot and/or batch headers
    again = Log(tmp_path / "t-0", config)
    # a usable snapshot stays at load (its data is unchanged until a truncation); one beyond the log goes
    assert (tmp_path / "t-0" / SNAPSHOT_FILE).exists() == (how in ("clean close", "snapshot then crash"))
    dup = again.append(pbatch(57))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (57, 59)
    assert again.append(pbatch(0, pid=7, epoch=3)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        again.append(pbatch(61))
    with pytest.raises(InvalidProducerEpochError):
        again.append(pbatch(3, pid=7, epoch=2))
    assert again.append(pbatch(60)).first_offset == end
    again.close()


def test_idle_producers_expire_and_the_state_stays_bounded(tmp_path: Path) -> None:
    clock = [1_000_000]
    log = Log(tmp_path / "t-0", LogConfig(producer_id_expiration_ms=60_000), now_ms=lambda: clock[0])
    for pid in range(100):  # a hundred short producer sessions
        log.append(pbatch(0, pid=pid))
    clock[0] += 30_000
    log.append(pbatch(3, pid=7))  # producer 7 is still active
    assert len(log.producer_state.producers) == 100
    clock[0] += 40_000  # 70 s after the sessions, 40 s after producer 7's last append
    assert log.expire_producers() == 99
    assert set(log.producer_state.producers) == {7}
    assert log.append(pbatch(3, pid=7)).duplicate  # the live producer keeps exact dedupe
    # an expired producer that returns is treated as new: any sequence is accepted
    assert not log.append(pbatch(30, pid=8)).duplicate
    # the expiry survives a reopen (the snapshot carries each producer's last append time)
    log.close()
    again = Log(tmp_path / "t-0", LogConfig(producer_id_expiration_ms=60_000), now_ms=lambda: clock[0])
    assert set(again.producer_state.producers) == {7, 8}
    again.close()


def test_producer_expiration_must_be_positive() -> None:
    with pytest.raises(ValueError, match="producer.id.expiration.ms"):
        LogConfig(producer_id_expiration_ms=0)


def test_a_retry_of_a_written_batch_is_a_duplicate_even_if_now_too_large(tmp_path) -> None:
    """A refusal must mean "not written": a producer whose first attempt had an unknown outcome retries
    after max.message.bytes was lowered; the batch was written, so the answer is the duplicate's offsets."""
    log = Log(tmp_path / "t-0", LogConfig())
    log.append(build_batch(2, producer_id=9, producer_epoch=0, base_sequence=0))
    big = build_batch(30, value_size=100, producer_id=9, producer_epoch=0, base_sequence=2)
    first = log.append(big)
    log.update_config(dataclasses.replace(log.config, max_message_bytes=len(big) - 1))
    again = log.append(big)
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset) == (2, 31)
    with pytest.raises(RecordTooLargeError):  # the next one really is too large: refused, nothing written
        log.append(build_batch(30, value_size=100, producer_id=9, producer_epoch=0, base_sequence=32))
    with pytest.raises(RecordTooLargeError):  # no producer id: nothing to recognise it by
        log.append(build_batch(30, value_size=100))
    assert log.log_end_offset == 32


def test_a_restart_rewrites_no_snapshot_and_a_truncation_removes_the_kept_one(tmp_path: Path) -> None:
    """A clean restart keeps the snapshot as written (thousands of logs then fsync nothing at start-up);
    a later truncation removes it, so a crash after it never combines the old state with the new data."""
    log = Log(tmp_path / "t-0")
    for i in range(4):
        log.append(pbatch(3 * i))  # offsets 0-11, sequences 0-11
    log.close()
    snap = tmp_path / "t-0" / SNAPSHOT_FILE
    written = snap.stat().st_mtime_ns
    again = Log(tmp_path / "t-0")
    assert not again.snapshot_producer_state()  # unchanged since the one on disk: not written again
    assert snap.stat().st_mtime_ns == written
    assert again.append(pbatch(9)).duplicate
    assert again.truncate_to(6)  # a follower truncating: the kept snapshot (offset 12) must go
    assert not snap.exists()
    assert not again.append(pbatch(6)).duplicate  # sequence 6 again, at offsets 6-8
    again.append(pbatch(0, pid=7))  # offsets 9-11: other data where the old snapshot's state had pid 4242's
    again.append(pbatch(0, pid=8))  # offsets 12-14: the log now reaches past the old snapshot's offset
    again.flush()  # then the process dies
    third = Log(tmp_path / "t-0")
    assert third.append(pbatch(0, pid=7)).duplicate  # the state comes from the log as it is now
    assert third.append(pbatch(6)).duplicate
    third.close()
