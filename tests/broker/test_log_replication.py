"""The log's replication duties on real files: partitionLeaderEpoch stamping, a follower's byte-identical
append, truncation (mid-segment, across segments, inside a batch) with recovery afterwards, the epoch cache
kept consistent, the replication high watermark bounding reads, and LogManager's HW checkpoint."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest

from ferry.broker.log.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE, EpochEntry
from ferry.broker.log.log import Log
from ferry.broker.log.log_manager import REPLICATION_CHECKPOINT_FILE, LogManager, read_checkpoint
from ferry.wire.log_config import LogConfig
from ferry.wire.record.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    LogOffsetOutOfRangeError,
    OffsetMismatchError,
)
from ferry.wire.record.record_batch import set_partition_leader_epoch, validate_batches
from tests.wire.storage_batches import build_batch, decode

PID = 4242


def files(log: Log, suffix: str = ".log") -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.dir.glob(f"*{suffix}"))}


def log_bytes(log: Log) -> bytes:
    return b"".join(files(log).values())


def batches_on_disk(log: Log) -> list[tuple[int, int, int]]:
    """(base offset, next offset, partitionLeaderEpoch) of every batch in the segment files (kafka-python
    decodes them and checks each CRC)."""
    out = []
    for data in files(log).values():
        for batch, _ in decode(data):
            out.append((batch.base_offset, batch.next_offset, batch.leader_epoch))
    return out


def record_offsets(log: Log) -> list[int]:
    return [r.offset for data in files(log).values() for _, records in decode(data) for r in records]


def replicate(leader: Log, follower: Log, max_bytes: int = 1 << 20) -> int:
    """A follower's fetch loop: what leader.read() returns (up to its log end) appended as it is."""
    appended = 0
    while follower.log_end_offset < leader.log_end_offset:
        fs = leader.read(follower.log_end_offset, max_bytes, upper_bound=leader.log_end_offset)
        assert fs is not None and fs.first_offset == follower.log_end_offset
        follower.append_as_follower(fs.read_bytes())
        appended += 1
    return appended


def idempotent(count: int, seq: int, epoch: int = 0) -> bytes:
    return build_batch(count, producer_id=PID, producer_epoch=epoch, base_sequence=seq)


@pytest.fixture
def cfg() -> LogConfig:
    return LogConfig(segment_bytes=3000, index_interval_bytes=200, consumers_see_unflushed=True)


# ---------------------------------------------------------------------------------------- leader epoch stamping

def test_append_stamps_the_leader_epoch_and_keeps_the_callers_buffer(tmp_path: Path, cfg: LogConfig) -> None:
    log = Log(tmp_path / "t-0", cfg)
    payload = bytearray(build_batch(3) + build_batch(2))
    original = bytes(payload)
    info = log.append(payload, leader_epoch=5)
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert bytes(payload) == original  # neither baseOffset nor the epoch written into the caller's buffer
    assert batches_on_disk(log) == [(0, 3, 5), (3, 5, 5)]
    log.append(build_batch(1), leader_epoch=5)
    log.append(build_batch(2), leader_epoch=7)
    assert batches_on_disk(log)[-2:] == [(5, 6, 5), (6, 8, 7)]
    assert log.leader_epoch_cache.entries == [EpochEntry(5, 0), EpochEntry(7, 6)]
    assert (log.dir / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n2\n5 0\n7 6\n"


def test_no_epoch_leaves_the_producers_value(tmp_path: Path, cfg: LogConfig) -> None:
    log = Log(tmp_path / "t-0", cfg)
    raw = bytearray(build_batch(2))
    set_partition_leader_epoch(raw, 3)
    log.append(raw)
    assert batches_on_disk(log) == [(0, 2, 3)] and log.leader_epoch_cache.entries == []


@pytest.mark.parametrize("topic_config", [{"message.timestamp.type": "LogAppendTime"}, {"compression.type": "gzip"}])
def test_stamping_with_rewritten_headers(tmp_path: Path, topic_config: dict[str, str]) -> None:
    log = Log(tmp_path / "t-0", LogConfig.from_topic_config(topic_config, LogConfig(consumers_see_unflushed=True)))
    log.append(build_batch(4), leader_epoch=2)
    log.append(build_batch(1, codec=3), leader_epoch=3)
    assert batches_on_disk(log) == [(0, 4, 2), (4, 5, 3)]


def test_an_older_epoch_is_fenced(tmp_path: Path, cfg: LogConfig) -> None:
    log = Log(tmp_path / "t-0", cfg)
    log.append(build_batch(1), leader_epoch=4)
    with pytest.raises(FencedLeaderEpochError) as e:
        log.append(build_batch(1), leader_epoch=3)
    assert e.value.kafka_error_code == 74
    assert log.log_end_offset == 1 and batches_on_disk(log) == [(0, 1, 4)]


def test_set_partition_leader_epoch_keeps_the_crc(tmp_path: Path) -> None:
    raw = bytearray(build_batch(2) + build_batch(1))
    set_partition_leader_epoch(raw, 9)
    assert [h.partition_leader_epoch for h in validate_batches(raw)] == [9, 9]


# ---------------------------------------------------------------------------------------- follower append

def _leader_with_history(tmp_path: Path, cfg: LogConfig) -> Log:
    leader = Log(tmp_path / "leader" / "t-0", cfg)
    seq = 0
    for i in range(60):
        epoch = 1 if i < 20 else (2 if i < 45 else 4)
        if i % 3 == 0:
            leader.append(idempotent(2, seq), leader_epoch=epoch)
            seq += 2
        else:
            leader.append(build_batch(1 + i % 4, codec=i % 2), leader_epoch=epoch)
    return leader


@pytest.mark.parametrize("max_bytes", [1, 700, 1 << 20])
def test_follower_log_is_byte_identical(tmp_path: Path, cfg: LogConfig, max_bytes: int) -> None:
    leader = _leader_with_history(tmp_path, cfg)
    assert len(files(leader)) > 3
    follower = Log(tmp_path / "follower" / "t-0", cfg)
    replicate(leader, follower, max_bytes)
    assert files(follower) == files(leader)  # same segments, same bytes
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    assert [e.epoch for e in follower.leader_epoch_cache.entries] == [1, 2, 4]
    assert follower.producer_state.producers[PID].batches == leader.producer_state.producers[PID].batches
    assert record_offsets(follower) == list(range(leader.log_end_offset))
    leader.close()
    follower.close()
    assert files(follower, ".index") == files(leader, ".index")
    assert files(follower, ".timeindex") == files(leader, ".timeindex")


def test_follower_rolls_inside_a_fetched_set(tmp_path: Path) -> None:
    leader = Log(tmp_path / "l" / "t-0", LogConfig(consumers_see_unflushed=True))
    for _ in range(30):
        leader.append(build_batch(2), leader_epoch=0)
    follower = Log(tmp_path / "f" / "t-0", LogConfig(segment_bytes=1500, consumers_see_unflushed=True))
    assert replicate(leader, follower) == 1  # one fetch, many segments' worth
    assert len(files(follower)) > 3 and log_bytes(follower) == log_bytes(leader)
    for seg in follower.segments[:-1]:
        assert seg.size <= 1500
    assert record_offsets(follower) == list(range(60))
    fs = follower.read(31, 1 << 20)
    assert fs is not None and fs.first_offset == 30


def test_follower_checks_offsets(tmp_path: Path, cfg: LogConfig) -> None:
    leader = Log(tmp_path / "l" / "t-0", cfg)
    for _ in range(3):
        leader.append(build_batch(2), leader_epoch=0)
    data = leader.read(0, 1 << 20).read_bytes()
    follower = Log(tmp_path / "f" / "t-0", cfg)
    with pytest.raises(OffsetMismatchError, match="starts at offset 2"):
        follower.append_as_follower(data[validate_batches(data)[0].size:])
    gap = bytearray(data)
    struct.pack_into(">q", gap, validate_batches(data)[0].size, 7)  # the 2nd batch claims offset 7
    with pytest.raises(OffsetMismatchError, match="offset 7"):
        follower.append_as_follower(gap)
    assert follower.log_end_offset == 0 and log_bytes(follower) == b""
    follower.append_as_follower(data)
    with pytest.raises(OffsetMismatchError):
        follower.append_as_follower(data)  # the same data again
    assert log_bytes(follower) == log_bytes(leader)


def test_follower_validates_like_a_produce(tmp_path: Path, cfg: LogConfig) -> None:
    follower = Log(tmp_path / "f" / "t-0", LogConfig(max_message_bytes=100, consumers_see_unflushed=True))
    bad = bytearray(build_batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(bad)
    # a leader's transactional batches are copied as they are (transactions, docs/transactions.md)
    txn = bytearray(build_batch(1, producer_id=1, producer_epoch=0, base_sequence=0, transactional=True))
    assert follower.append_as_follower(txn).last_offset == 0
    assert follower.producer_state.ongoing == {1: 0}
    big = bytearray(build_batch(3, value_size=500))
    struct.pack_into(">q", big, 0, 1)
    assert follower.append_as_follower(big).last_offset == 3  # max.message.bytes is the leader's business


def test_follower_that_becomes_leader_recognises_retries(tmp_path: Path, cfg: LogConfig) -> None:
    leader = Log(tmp_path / "l" / "t-0", cfg)
    retried = idempotent(3, 10)
    leader.append(idempotent(10, 0), leader_epoch=1)
    leader.append(retried, leader_epoch=1)
    follower = Log(tmp_path / "f" / "t-0", cfg)
    replicate(leader, follower)
    info = follower.append(retried, leader_epoch=2)  # the producer retries at the new leader
    assert info.duplicate and (info.first_offset, info.last_offset) == (10, 12)
    assert follower.append(idempotent(1, 13), leader_epoch=2).first_offset == 13
    assert follower.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(2, 13)]


def test_follower_flushes_by_the_same_policy(tmp_path: Path) -> None:
    cfg = LogConfig(flush_interval_messages=5)
    leader = Log(tmp_path / "l" / "t-0", cfg)
    requested: list[Log] = []
    follower = Log(tmp_path / "f" / "t-0", cfg)
    follower.flush_requested = requested.append
    leader.append(build_batch(3))
    leader.flush()
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    assert follower.unflushed_messages == 3 and follower.needs_flush(follower._clock() + 1000) and not requested
    leader.append(build_batch(3))
    leader.flush()
    follower.append_as_follower(leader.read(3, 1 << 20).read_bytes())
    assert requested == [follower]
    assert follower.flush() == 6 and follower.unflushed_messages == 0


# ---------------------------------------------------------------------------------------- truncation

def _log_of(tmp_path: Path, cfg: LogConfig, batches: int = 40) -> Log:
    log = Log(tmp_path / "t-0", cfg)
    for i in range(batches):
        log.append(build_batch(3), leader_epoch=i // 10)  # epochs 0..3, 30 offsets each
    return log


def test_truncate_mid_segment_then_append(tmp_path: Path, cfg: LogConfig) -> None:
    log = _log_of(tmp_path, cfg)
    n_segments = len(log.segments)
    last = log.segments[-1]
    cut = last.base_offset + 6
    assert log.truncate_to(cut)
    assert log.log_end_offset == cut and len(log.segments) == n_segments
    assert batches_on_disk(log)[-1][1] == cut
    assert not log.truncate_to(cut) and not log.truncate_to(cut + 100)  # idempotent
    log.append(build_batch(2), leader_epoch=3)
    assert record_offsets(log) == list(range(cut + 2))


def test_truncate_inside_a_batch_removes_the_whole_batch(tmp_path: Path, cfg: LogConfig) -> None:
    log = _log_of(tmp_path, cfg)
    assert log.truncate_to(100)  # batch 99..101
    assert log.log_end_offset == 99 and record_offsets(log) == list(range(99))


def test_truncate_across_segments(tmp_path: Path, cfg: LogConfig) -> None:
    log = _log_of(tmp_path, cfg)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    cut = bases[1] + 3  # inside the second segment: the later ones go
    log.truncate_to(cut)
    assert [s.base_offset for s in log.segments] == bases[:2] and log.log_end_offset == cut
    assert sorted(p.name for p in log.dir.glob("*.log")) == [f"{b:020d}.log" for b in bases[:2]]
    assert len(list(log.dir.glob("*.deleted"))) == 3 * (len(bases) - 2)  # kept for reads in flight
    log.delete_retained(log._clock() + log.config.file_delete_delay_ms + 1)
    assert not list(log.dir.glob("*.deleted"))
    for _ in range(20):
        log.append(build_batch(3), leader_epoch=9)
    assert record_offsets(log) == list(range(cut + 60))
    assert len(log.segments) > 2


def test_truncate_at_a_segment_base_reactivates_the_previous_segment(tmp_path: Path, cfg: LogConfig) -> None:
    log = _log_of(tmp_path, cfg)
    bases = [s.base_offset for s in log.segments]
    log.truncate_to(bases[2])
    assert [s.base_offset for s in log.segments] == bases[:2] and log.log_end_offset == bases[2]
    log.append(build_batch(1), leader_epoch=5)  # appends (or rolls) from the end of the 2nd segment
    assert record_offsets(log) == list(range(bases[2] + 1))
    log.close()
    again = Log(tmp_path / "t-0", cfg, recovery_point=bases[2] + 1)
    assert again.recovered_segments == 0  # the cut indexes load as they are
    assert again.log_end_offset == bases[2] + 1 and record_offsets(again) == list(range(bases[2] + 1))


def test_truncate_keeps_indexes_and_timestamps_right(tmp_path: Path, cfg: LogConfig) -> None:
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=1 << 20, index_interval_bytes=100))
    for i in range(50):
        log.append(build_batch(2, timestamp=1_000_000 + i * 10))
    log.flush()
    log.truncate_to(61)  # batch 60..61 goes
    seg = log.segments[-1]
    assert seg.max_timestamp == 1_000_000 + 29 * 10 and seg.indexes.offset_of_max_timestamp == 58
    assert log.offset_for_timestamp(1_000_000 + 200) == (40, 1_000_000 + 200)
    assert log.offset_for_timestamp(1_000_000 + 300) is None
    for i in range(10):
        log.append(build_batch(2, timestamp=2_000_000 + i))
    log.flush()
    assert log.offset_for_timestamp(2_000_000) == (60, 2_000_000)
    log.close()
    again = Log(tmp_path / "t-0", LogConfig(segment_bytes=1 << 20, index_interval_bytes=100), recovery_point=80)
    assert again.recovered_segments == 0 and again.log_end_offset == 80
    assert [again.read(o, 1).first_offset for o in (0, 33, 61, 79)] == [0, 32, 60, 78]


def test_truncate_clamps_flushed_recovery_point_and_hw(tmp_path: Path, cfg: LogConfig) -> None:
    log = _log_of(tmp_path, cfg)
    log.flush()
    log.set_replication_hw(100)
    log.truncate_to(60)
    assert log.flushed_offset == 60 and log.replication_hw == 60 and log.high_watermark == 60
    assert log.unflushed_messages == 0 and not log.needs_flush(log._clock() + 10**6)
    log.truncate_to(0)
    assert (log.log_end_offset, log.flushed_offset, log.replication_hw) == (0, 0, 0)
    assert log.leader_epoch_cache.entries == [] and log.read(0, 100) is None


def test_truncate_truncates_the_epoch_cache(tmp_path: Path, cfg: LogConfig) -> None:
    log = _log_of(tmp_path, cfg)
    assert [e.start_offset for e in log.leader_epoch_cache.entries] == [0, 30, 60, 90]
    log.truncate_to(61)  # inside epoch 2's first batch (60..62): the whole batch and epoch 2 go
    assert log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(1, 30)]
    assert log.leader_epoch_cache.end_offset_for(1, log.log_end_offset) == (1, 60)
    log.append(build_batch(1), leader_epoch=6)
    assert log.leader_epoch_cache.entries[-1] == EpochEntry(6, 60)


def test_truncate_rebuilds_producer_state(tmp_path: Path, cfg: LogConfig) -> None:
    log = Log(tmp_path / "t-0", cfg)
    log.append(idempotent(2, 0))
    log.snapshot_producer_state()  # a snapshot at offset 2, below the cut: used
    log.append(idempotent(2, 2))
    log.append(idempotent(2, 4))
    log.truncate_to(4)
    assert log.producer_state.producers[PID].last_seq == 3
    info = log.append(idempotent(2, 4))  # the removed batch, resent: new, not a duplicate
    assert not info.duplicate and info.first_offset == 4
    assert log.append(idempotent(2, 2)).duplicate  # an older one still is
    log.truncate_to(1)  # inside the first batch: everything goes, the snapshot (offset 2) is now beyond
    assert PID not in log.producer_state.producers and log.log_end_offset == 0


def test_truncate_below_log_start_restarts_the_log(tmp_path: Path, cfg: LogConfig) -> None:
    log = _log_of(tmp_path, cfg)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (500, 500, 1)
    assert log.leader_epoch_cache.entries == [] and log.producer_state.producers == {}
    assert log.append(build_batch(2), leader_epoch=7).first_offset == 500
    with pytest.raises(LogOffsetOutOfRangeError):
        log.read(10, 100)
    log.truncate_to(400)  # below the log start: emptied again, restarting there
    assert (log.log_start_offset, log.log_end_offset) == (400, 400)
    log.append(build_batch(1), leader_epoch=8)
    log.close()
    again = Log(tmp_path / "t-0", cfg)
    assert (again.log_start_offset, again.log_end_offset) == (400, 401)
    assert again.leader_epoch_cache.entries == [EpochEntry(8, 400)]


def test_recovery_after_truncation(tmp_path: Path, cfg: LogConfig) -> None:
    """Crash (no close) after a truncation and new appends: the reopened log is the truncated one plus the
    appends, whatever recovery point the checkpoint had."""
    log = _log_of(tmp_path, cfg)
    log.flush()
    log.truncate_to(75)
    log.append(build_batch(5), leader_epoch=8)
    log.flush()
    expected = record_offsets(log)
    for recovery_point in (None, 0, 80, 120):  # 120: a checkpoint written before the truncation
        again = Log(tmp_path / "t-0", cfg, recovery_point=recovery_point)
        assert again.log_end_offset == 80 and record_offsets(again) == expected
        assert [e.epoch for e in again.leader_epoch_cache.entries] == [0, 1, 2, 8]
        again.close()


def test_reads_during_truncation(tmp_path: Path, cfg: LogConfig) -> None:
    log = _log_of(tmp_path, cfg, batches=20)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                fs = log.read(0, 1 << 20)
                if fs is not None:
                    fs.read_bytes()  # may end inside a batch written after a truncation: clients cope
            except LogOffsetOutOfRangeError:
                pass
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(30):
            log.truncate_to(log.log_end_offset - 9)
            for _ in range(3):
                log.append(build_batch(3), leader_epoch=2 + i)
    finally:
        stop.set()
        t.join()
    assert not errors
    assert record_offsets(log) == list(range(log.log_end_offset))


# ---------------------------------------------------------------------------------------- epoch cache at open

def test_epoch_cache_survives_reopen_and_is_cut_with_a_torn_tail(tmp_path: Path, cfg: LogConfig) -> None:
    log = Log(tmp_path / "t-0", cfg)
    log.append(build_batch(3), leader_epoch=1)
    log.append(build_batch(3), leader_epoch=2)
    log.flush()
    log.close()
    assert Log(tmp_path / "t-0", cfg).leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(2, 3)]
    seg = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    with open(seg, "r+b") as f:  # a crash tore epoch 2's only batch
        f.truncate(os.path.getsize(seg) - 5)
    again = Log(tmp_path / "t-0", cfg)
    assert again.log_end_offset == 3 and again.leader_epoch_cache.entries == [EpochEntry(1, 0)]
    assert (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n1\n1 0\n"


def test_missing_or_damaged_epoch_checkpoint(tmp_path: Path, cfg: LogConfig) -> None:
    log = Log(tmp_path / "t-0", cfg)
    assert log.leader_epoch_cache.entries == []
    for epoch in (3, 3, 5, 5, 6):
        log.append(build_batch(2), leader_epoch=epoch)
    log.close()
    (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT_FILE).write_text("0\n7\ngarbage")
    again = Log(tmp_path / "t-0", cfg)  # rebuilt from the batches' partitionLeaderEpoch
    assert again.leader_epoch_cache.entries == [EpochEntry(3, 0), EpochEntry(5, 4), EpochEntry(6, 8)]


def test_retention_moves_the_first_epoch_and_respects_the_hw(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=2000, retention_bytes=0, file_delete_delay_ms=0)
    log = _log_of(tmp_path, cfg)
    log.flush()
    log.set_replication_hw(40)
    log.delete_retained()
    assert log.log_start_offset <= 40
    for seg in log.segments[1:]:
        assert seg.base_offset >= 40  # nothing at or above the HW was deleted
    start = log.log_start_offset
    assert start > 0 and log.leader_epoch_cache.entries[0] == EpochEntry(start // 30, start)
    log.set_replication_hw(None)
    log.delete_retained()
    assert log.log_start_offset > 40 and log.leader_epoch_cache.entries[0].start_offset == log.log_start_offset


# ---------------------------------------------------------------------------------------- replication HW

def test_replication_hw_bounds_reads(tmp_path: Path, cfg: LogConfig) -> None:
    log = _log_of(tmp_path, cfg, batches=10)
    grew: list[int] = []
    log.add_high_watermark_listener(lambda lg: grew.append(lg.high_watermark))
    assert log.replication_hw is None and log.high_watermark == 30
    assert log.set_replication_hw(7) == 7 and log.high_watermark == 7 and grew == []
    fs = log.read(0, 1 << 20)
    assert [b.base_offset for b, _ in decode(fs.read_bytes())] == [0, 3]  # whole batches below the HW
    assert log.read(6, 1 << 20) is None  # the batch 6..8 is not all committed
    assert log.read(6, 1 << 20, upper_bound=log.log_end_offset) is not None  # a follower's fetch
    log.set_replication_hw(9)
    assert grew == [9] and log.read(6, 1 << 20).first_offset == 6
    assert log.set_replication_hw(1000) == 30 and log.set_replication_hw(-5) == 0  # clamped
    assert log.set_replication_hw(None) is None and log.high_watermark == 30


def test_replication_hw_bounds_offsets_for_timestamps(tmp_path: Path, cfg: LogConfig) -> None:
    log = Log(tmp_path / "t-0", cfg)
    for ts in (100, 200, 300):
        log.append(build_batch(3, timestamp=ts))
    log.set_replication_hw(3)
    assert log.offset_for_timestamp(50) == (0, 100) and log.offset_for_timestamp(150) is None
    log.set_replication_hw(6)
    assert log.offset_for_timestamp(150) == (3, 200)


def test_replication_hw_and_flushing_both_bound(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig())  # consumers see flushed data only
    log.append(build_batch(5))
    log.set_replication_hw(5)
    assert log.high_watermark == 0
    log.flush()
    assert log.high_watermark == 5
    log.append(build_batch(5))
    log.flush()
    assert log.high_watermark == 5
    log.set_replication_hw(8)
    assert log.high_watermark == 8


def test_replication_hw_given_at_open_is_clamped(tmp_path: Path, cfg: LogConfig) -> None:
    _log_of(tmp_path, cfg, batches=5).close()
    assert Log(tmp_path / "t-0", cfg, replication_hw=9).replication_hw == 9
    assert Log(tmp_path / "t-0", cfg, replication_hw=99).replication_hw == 15
    assert Log(tmp_path / "t-0", cfg).replication_hw is None


# ---------------------------------------------------------------------------------------- LogManager

def test_log_manager_checkpoints_high_watermarks(tmp_path: Path) -> None:
    with LogManager(tmp_path, LogConfig(consumers_see_unflushed=True)) as m:
        a = m.get_or_create("a", 0)
        b = m.get_or_create("b", 1)
        c = m.get_or_create("c", 0)
        for lg in (a, b, c):
            lg.append(build_batch(10), leader_epoch=0)
        a.set_replication_hw(4)
        b.set_replication_hw(10)
        m.checkpoint_recovery_points()
        assert read_checkpoint(tmp_path / REPLICATION_CHECKPOINT_FILE) == {("a", 0): 4, ("b", 1): 10}
        assert (tmp_path / REPLICATION_CHECKPOINT_FILE).read_text() == "0\n2\na 0 4\nb 1 10\n"
        a.set_replication_hw(6)  # written again at shutdown
    with LogManager(tmp_path, LogConfig(consumers_see_unflushed=True)) as m:
        assert m.get("a", 0).replication_hw == 6 and m.get("b", 1).replication_hw == 10
        assert m.get("c", 0).replication_hw is None
        assert m.get("a", 0).high_watermark == 6
        assert m.get("a", 0).leader_epoch_cache.entries == [EpochEntry(0, 0)]
        assert m.get("nope", 0) is None
    (tmp_path / REPLICATION_CHECKPOINT_FILE).write_text("0\n1\na 0 500\n")  # beyond the log: clamped
    with LogManager(tmp_path) as m:
        assert m.get("a", 0).replication_hw == 10 and m.get("b", 1).replication_hw is None


def test_log_manager_deletes_one_log(tmp_path: Path) -> None:
    with LogManager(tmp_path) as m:
        a = m.get_or_create("a", 0)
        a.append(build_batch(3))
        m.get_or_create("b", 0).append(build_batch(1))
        assert m.delete_log("a", 0) and not (tmp_path / "a-0").exists() and m.get("a", 0) is None
        assert not m.delete_log("a", 0)
        assert not [p for p in tmp_path.iterdir() if p.name.endswith("-delete")]
    (tmp_path / "b-0.0123abc-delete").mkdir()  # a deletion a crash interrupted
    with LogManager(tmp_path) as m:
        assert set(m.all_logs()) == {("b", 0)}
    assert not (tmp_path / "b-0.0123abc-delete").exists()
