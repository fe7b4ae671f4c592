"""Log compaction on real log files: the last record per key, tombstones, transactions, the active segment,
offsets kept, crash-safe swaps (a real process killed with SIGKILL mid-swap), readers during cleaning,
replicas of a compacted log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ferry.broker.log.log import Log
from ferry.broker.log.log_cleaner import CLEANER_CHECKPOINT_FILE, CleanerConfig, LogCleaner
from ferry.broker.log.log_compaction import SWAP_DELAY_ENV
from ferry.broker.log.log_transactions import MARKER
from ferry.wire.log_config import LogConfig
from ferry.wire.record.control_batch import build_marker
from ferry.wire.record.record_batch import TRANSACTIONAL_MASK
from tests.broker.compaction_helpers import keyed_batch, latest_per_key, read_log
from tests.wire.storage_batches import CODECS

COMPACT = dict(cleanup_policy="compact", segment_bytes=16 * 1024, consumers_see_unflushed=True,
               min_cleanable_dirty_ratio=0.0, file_delete_delay_ms=0)


class Clock:
    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.ms


def cleaner_for(log: Log, clock: Clock | None = None) -> LogCleaner:
    kw = {"clock": clock} if clock is not None else {}
    return LogCleaner(CleanerConfig(), log.dir.parent, lambda: {("t", 0): log}, **kw)


def write_keys(log: Log, n: int, keys: int, batch: int = 10, codec: int = 0, start: int = 0,
               timestamp: int | None = None) -> list[tuple[bytes, bytes | None]]:
    written = []
    for b in range(start, start + n, batch):
        pairs = [(f"k{i % keys}".encode(), f"v{i}".encode()) for i in range(b, min(b + batch, start + n))]
        log.append(keyed_batch(pairs, codec=codec, timestamp=timestamp))
        written.extend(pairs)
    return written


def finish_segment(log: Log, clock: Clock | None = None) -> None:
    """Make everything written so far cleanable: flush and roll (the active segment is never cleaned)."""
    log.flush()
    log.local.roll(log.log_end_offset, clock() if clock else int(time.time() * 1000))


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_key_heavy_log_cleans_to_the_last_record_per_key(tmp_path: Path, codec: str) -> None:
    log = Log(tmp_path / "t-0", LogConfig(**COMPACT))
    written = write_keys(log, 20_000, 500, codec=CODECS[codec])
    finish_segment(log)
    active = log.segments[-1]
    tail = write_keys(log, 50, 500, start=20_000)  # the active segment: never cleaned
    end_before = log.log_end_offset
    before = log.size_in_bytes
    cleaner = cleaner_for(log)
    assert cleaner.clean_once()
    records = read_log(log)
    assert log.log_end_offset == end_before and log.log_start_offset == 0
    assert log.segments[-1] is active
    cleaned = [r for r in records if r[0] < active.base_offset]
    expected = latest_per_key(written)
    assert len(cleaned) == 500
    assert {k: v for _, k, v in cleaned} == expected
    # offsets are the original ones: the record with value v{i} sits at offset i
    assert all(int(v[1:]) == off for off, _, v in records)
    assert [r[2] for r in records[-50:]] == [v for _, v in tail]
    assert log.size_in_bytes < before / 10
    assert (tmp_path / CLEANER_CHECKPOINT_FILE).read_text().splitlines()[2] == f"t 0 {active.base_offset}"
    assert not cleaner.clean_once()  # nothing dirty left
    log.close()
    reopened = Log(tmp_path / "t-0", LogConfig(**COMPACT))  # holes survive a restart
    assert read_log(reopened) == records
    reopened.close()


def test_second_clean_uses_only_the_dirty_part_and_keeps_clean_keys(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(**COMPACT))
    written = write_keys(log, 2_000, 100)
    finish_segment(log)
    cleaner = cleaner_for(log)
    assert cleaner.clean_once()
    written += write_keys(log, 500, 100, start=2_000)
    more = [(f"k{i}".encode(), f"new{i}".encode()) for i in range(10)]  # 10 keys updated, 90 untouched
    log.append(keyed_batch(more))
    written += more
    finish_segment(log)
    assert cleaner.clean_once()
    records = read_log(log)
    assert len(records) == 100
    assert {k: v for _, k, v in records} == latest_per_key(written)


def test_tombstones_stay_for_delete_retention_ms_after_cleaning_then_go(tmp_path: Path) -> None:
    clock = Clock()
    log = Log(tmp_path / "t-0", LogConfig(**COMPACT, delete_retention_ms=60_000), now_ms=clock)
    written = write_keys(log, 1_000, 50, timestamp=clock.ms)
    tombs = [(f"k{i}".encode(), None) for i in range(0, 50, 2)]
    log.append(keyed_batch(tombs, timestamp=clock.ms))
    written += tombs
    finish_segment(log, clock)
    cleaner = cleaner_for(log, clock)
    assert cleaner.clean_once()
    records = read_log(log)
    assert {k: v for _, k, v in records} == latest_per_key(written)  # 25 values + 25 tombstones
    assert sum(v is None for _, _, v in records) == 25
    clock.ms += 30_000
    log.append(keyed_batch([(b"k1", b"late")], timestamp=clock.ms))
    finish_segment(log, clock)
    assert cleaner.clean_once()
    assert sum(v is None for _, _, v in read_log(log)) == 25  # not yet delete.retention.ms old
    clock.ms += 31_000
    log.append(keyed_batch([(b"k3", b"later")], timestamp=clock.ms))
    finish_segment(log, clock)
    assert cleaner.clean_once()
    records = read_log(log)
    assert not [r for r in records if r[2] is None]
    assert len(records) == 25 and dict((k, v) for _, k, v in records)[b"k3"] == b"later"


def test_aborted_records_go_and_markers_follow_kafkas_rules(tmp_path: Path) -> None:
    clock = Clock()
    log = Log(tmp_path / "t-0", LogConfig(**COMPACT, delete_retention_ms=1_000), now_ms=clock)
    ts = clock.ms
    log.append(keyed_batch([(b"a", b"committed")], producer_id=7, producer_epoch=0, base_sequence=0,
                           transactional=True, timestamp=ts), allow=TRANSACTIONAL_MASK)
    log.append_marker(7, 0, committed=True)
    log.append(keyed_batch([(b"b", b"aborted")], producer_id=8, producer_epoch=0, base_sequence=0,
                           transactional=True, timestamp=ts), allow=TRANSACTIONAL_MASK)
    log.append(build_marker(8, 0, committed=False, timestamp_ms=ts), -1, MARKER)
    log.append(keyed_batch([(b"b", b"plain")], timestamp=ts))
    assert log.aborted_transactions(0, log.log_end_offset) == [(8, 2)]
    finish_segment(log, clock)
    cleaner = cleaner_for(log, clock)
    assert cleaner.clean_once()
    assert [(k, v) for _, k, v in read_log(log)] == [(b"a", b"committed"), (b"b", b"plain")]
    markers = _control_offsets(log)
    assert markers == [1, 3]  # both kept: not yet past delete.retention.ms
    clock.ms += 5_000
    log.append(keyed_batch([(b"c", b"x")], timestamp=clock.ms))
    finish_segment(log, clock)
    assert cleaner.clean_once()
    # the COMMIT marker stays (its transaction's record "a" is still there); the ABORT marker had nothing left
    assert _control_offsets(log) == [1]
    assert log.aborted_transactions(0, log.log_end_offset) == []
    assert [(k, v) for _, k, v in read_log(log)] == [(b"a", b"committed"), (b"b", b"plain"), (b"c", b"x")]


def _control_offsets(log: Log) -> list[int]:
    from tests.wire.storage_batches import decode
    out = []
    for seg in log.segments:
        for batch, _ in decode(os.pread(seg.fd, seg.size, 0)):
            if batch.is_control_batch:
                out.append(batch.base_offset)
    return out


def test_min_compaction_lag_and_dirty_ratio_decide_when(tmp_path: Path) -> None:
    clock = Clock()
    log = Log(tmp_path / "t-0", LogConfig(**{**COMPACT, "min_cleanable_dirty_ratio": 0.5},
                                          min_compaction_lag_ms=10_000), now_ms=clock)
    write_keys(log, 1_000, 1_000, timestamp=clock.ms)
    finish_segment(log, clock)
    cleaner = cleaner_for(log, clock)
    assert not cleaner.clean_once()  # too young
    clock.ms += 11_000
    assert cleaner.clean_once()
    write_keys(log, 10, 10, start=1_000, timestamp=clock.ms)  # a little dirt: ratio well below 0.5
    finish_segment(log, clock)
    clock.ms += 11_000
    c = cleaner.candidate(("t", 0), log, clock.ms)
    assert c is None
    log.update_config(LogConfig(**{**COMPACT, "min_cleanable_dirty_ratio": 0.5}, max_compaction_lag_ms=5_000))
    c = cleaner.candidate(("t", 0), log, clock.ms)
    assert c is not None and c.dirty_ratio < 0.5  # overdue: cleaned whatever the ratio


def test_delete_policy_logs_are_not_cleaned_and_compact_only_logs_keep_old_segments(tmp_path: Path) -> None:
    plain = Log(tmp_path / "p-0", LogConfig(**{**COMPACT, "cleanup_policy": "delete"}))
    write_keys(plain, 100, 5)
    finish_segment(plain)
    assert cleaner_for(plain).candidate(("p", 0), plain, int(time.time() * 1000)) is None
    compacted = Log(tmp_path / "c-0", LogConfig(**COMPACT, retention_ms=1))
    write_keys(compacted, 100, 5, timestamp=1)
    finish_segment(compacted)
    assert compacted.delete_retained() == 0  # compact alone: retention deletes nothing
    both = Log(tmp_path / "b-0", LogConfig(**{**COMPACT, "cleanup_policy": "compact,delete"}, retention_ms=1))
    write_keys(both, 100, 5, timestamp=1)
    finish_segment(both)
    assert both.delete_retained() == 1
    for lg in (plain, compacted, both):
        lg.close()


def test_readers_during_cleaning_never_go_back_nor_fail(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(**{**COMPACT, "file_delete_delay_ms": 60_000}))
    written = write_keys(log, 30_000, 1_000)
    finish_segment(log)
    errors: list[BaseException] = []
    passes = [0]
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                records = read_log(log, 0, max_bytes=4096)  # asserts offsets only grow
                assert records and records[-1][0] == 29_999
                passes[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        assert cleaner_for(log).clean_once()
        deadline = time.monotonic() + 30
        start = passes[0]
        while passes[0] < start + 2 and time.monotonic() < deadline and not errors:
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors, errors[0]
    assert passes[0] >= 2
    assert {k: v for _, k, v in read_log(log)} == latest_per_key(written)


_CRASH_SCRIPT = """
import sys
from ferry.broker.log.log import Log
from ferry.broker.log.log_cleaner import CleanerConfig, LogCleaner
from ferry.wire.log_config import LogConfig
log = Log(sys.argv[1], LogConfig(cleanup_policy="compact", segment_bytes=16384, consumers_see_unflushed=True,
                                 min_cleanable_dirty_ratio=0.0))
print("cleaning", flush=True)
LogCleaner(CleanerConfig(), log.dir.parent, lambda: {("t", 0): log}).clean_once()
print("done", flush=True)
"""


@pytest.mark.parametrize("stage", ["cleaned", "swap"])
def test_kill_9_mid_clean_leaves_a_readable_log_and_the_next_clean_finishes(tmp_path: Path, stage: str) -> None:
    log = Log(tmp_path / "t-0", LogConfig(**COMPACT))
    written = write_keys(log, 20_000, 300)
    finish_segment(log)
    tail = write_keys(log, 30, 300, start=20_000)
    written += tail
    log.close()
    env = dict(os.environ, **{SWAP_DELAY_ENV: f"{stage}:30"}, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", _CRASH_SCRIPT, str(tmp_path / "t-0")], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        want = ".log.swap" if stage == "swap" else ".log.cleaned"
        deadline = time.monotonic() + 60
        while not any(p.name.endswith(want) for p in (tmp_path / "t-0").iterdir()):
            assert proc.poll() is None and time.monotonic() < deadline, "the cleaner never got there"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    reopened = Log(tmp_path / "t-0", LogConfig(**COMPACT))
    records = read_log(reopened)
    names = [p.name for p in (tmp_path / "t-0").iterdir()]
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".swap-end", ".deleted"))], names
    assert {k: v for _, k, v in records} == latest_per_key(written)  # nothing lost: the latest of each key
    assert reopened.log_end_offset == 20_030
    cleaner = cleaner_for(reopened)
    cleaner.clean_once()
    records = read_log(reopened)
    assert len([r for r in records if r[0] < 20_000]) == 300
    assert {k: v for _, k, v in records} == latest_per_key(written)
    reopened.close()


def test_a_follower_copies_a_compacted_log_with_its_holes(tmp_path: Path) -> None:
    leader = Log(tmp_path / "l" / "t-0", LogConfig(**COMPACT))
    written = write_keys(leader, 5_000, 100)
    finish_segment(leader)
    written += write_keys(leader, 20, 100, start=5_000)
    assert cleaner_for(leader).clean_once()
    follower = Log(tmp_path / "f" / "t-0", LogConfig(**COMPACT))
    for _ in range(10_000):  # the replica fetcher's loop: fetch from the follower's log end, append
        fs = leader.read(follower.log_end_offset, 8192)
        if fs is None:
            break
        follower.append_as_follower(fs.read_bytes())
    assert follower.log_end_offset == leader.log_end_offset
    assert read_log(follower) == read_log(leader)
    assert {k: v for _, k, v in read_log(follower)} == latest_per_key(written)
    plain = Log(tmp_path / "p" / "t-0", LogConfig(consumers_see_unflushed=True))
    with pytest.raises(Exception, match="starts at offset"):
        plain.append_as_follower(leader.read(4_900, 8192).read_bytes())  # holes only on compacted topics


def test_cleanup_policy_config_names() -> None:
    c = LogConfig.from_topic_config({"cleanup.policy": "delete,compact", "min.cleanable.dirty.ratio": "0.1",
                                     "delete.retention.ms": "5", "min.compaction.lag.ms": "7",
                                     "max.compaction.lag.ms": "9"})
    assert (c.cleanup_policy, c.compact, c.delete) == ("compact,delete", True, True)
    assert (c.min_cleanable_dirty_ratio, c.delete_retention_ms, c.min_compaction_lag_ms,
            c.max_compaction_lag_ms) == (0.1, 5, 7, 9)
    for name, value in (("cleanup.policy", "shred"), ("min.cleanable.dirty.ratio", "2"),
                        ("min.cleanable.dirty.ratio", "x"), ("delete.retention.ms", "-1")):
        with pytest.raises(ValueError, match=name):
            LogConfig.from_topic_config({name: value})


def test_a_full_offset_map_cleans_part_of_the_log_and_the_next_clean_the_rest(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(**COMPACT))
    written = write_keys(log, 20_000, 2_000)
    finish_segment(log)
    segments = len(log.segments) - 1
    assert segments >= 4
    # room for about one segment's keys: each clean maps at least one dirty segment and stops after the first
    # segment that fills the map
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=2_000 * 100), tmp_path, lambda: {("t", 0): log})
    first_ends = []
    for _ in range(segments + 2):
        if not cleaner.clean_once():
            break
        first_ends.append(cleaner.first_dirty_offset(("t", 0), log))
    assert len(first_ends) >= 2 and first_ends == sorted(first_ends)
    assert first_ends[-1] == log.segments[-1].base_offset
    records = read_log(log)
    assert len(records) == 2_000
    assert {k: v for _, k, v in records} == latest_per_key(written)


def test_the_io_throttle_holds_the_cleaner_to_its_rate(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(**COMPACT))
    write_keys(log, 20_000, 100)
    finish_segment(log)
    size = log.size_in_bytes
    rate = size  # one log's worth per second: the two passes read it twice, so at least ~1.5 s
    cleaner = LogCleaner(CleanerConfig(io_max_bytes_per_second=rate), tmp_path, lambda: {("t", 0): log})
    t0 = time.monotonic()
    assert cleaner.clean_once()
    elapsed = time.monotonic() - t0
    stats = cleaner.last_stats
    assert stats is not None and stats.bytes_read >= 2 * size * 0.9
    assert elapsed >= 1.4, elapsed


def test_cleaner_settings_from_broker_properties() -> None:
    from ferry.broker.log.log_cleaner import CleanerConfig as C
    c = C.from_properties({"log.cleaner.enable": "false", "log.cleaner.threads": "2",
                           "log.cleaner.io.max.bytes.per.second": "1e6", "log.cleaner.backoff.ms": "100",
                           "log.cleaner.dedupe.buffer.size": "1000000"})
    assert (c.enable, c.threads, c.io_max_bytes_per_second, c.backoff_ms, c.dedupe_buffer_size) == (
        False, 2, 1e6, 100, 1_000_000)
    for key, value in (("log.cleaner.threads", "0"), ("log.cleaner.enable", "maybe"),
                       ("log.cleaner.io.max.bytes.per.second", "fast")):
        with pytest.raises(ValueError, match=key):
            C.from_properties({key: value})


def test_cleaner_threads_start_clean_and_stop(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(**COMPACT))
    write_keys(log, 5_000, 50)
    finish_segment(log)
    off = LogCleaner(CleanerConfig(enable=False), tmp_path, lambda: {("t", 0): log})
    off.start()
    time.sleep(0.3)
    assert off.cleans == 0
    cleaner = LogCleaner(CleanerConfig(threads=2, backoff_ms=50), tmp_path, lambda: {("t", 0): log})
    cleaner.start()
    try:
        deadline = time.monotonic() + 30
        while cleaner.cleans == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        cleaner.stop()
    assert cleaner.cleans == 1
    assert len(read_log(log)) == 50


def test_idempotent_producer_state_survives_cleaning_and_a_restart(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(**COMPACT))
    batches = [keyed_batch([(b"same", f"v{i}".encode())], producer_id=5, producer_epoch=0, base_sequence=i)
               for i in range(300)]
    for b in batches:
        log.append(b)
    finish_segment(log)
    assert cleaner_for(log).clean_once()
    assert [(o, v) for o, _, v in read_log(log)] == [(299, b"v299")]  # 299 batches emptied and dropped
    log.close()
    reopened = Log(tmp_path / "t-0", LogConfig(**COMPACT))
    again = reopened.append(batches[-1])  # a retry of the last batch: recognised, not written twice
    assert again.duplicate and again.first_offset == 299
    nxt = reopened.append(keyed_batch([(b"same", b"v300")], producer_id=5, producer_epoch=0, base_sequence=300))
    assert (nxt.first_offset, nxt.duplicate) == (300, False)
    reopened.close()


def test_a_deleted_logs_checkpoint_goes_so_a_new_log_of_that_name_starts_dirty(tmp_path: Path) -> None:
    logs = {("t", 0): Log(tmp_path / "t-0", LogConfig(**COMPACT))}
    write_keys(logs[("t", 0)], 2_000, 10)
    finish_segment(logs[("t", 0)])
    cleaner = LogCleaner(CleanerConfig(), tmp_path, lambda: dict(logs))
    assert cleaner.clean_once()
    assert "t 0" in (tmp_path / CLEANER_CHECKPOINT_FILE).read_text()
    logs.pop(("t", 0)).close()
    assert not cleaner.clean_once()
    assert "t 0" not in (tmp_path / CLEANER_CHECKPOINT_FILE).read_text()
    fresh = logs[("t", 0)] = Log(tmp_path / "t-0-new", LogConfig(**COMPACT))
    written = write_keys(fresh, 500, 10)
    finish_segment(fresh)
    assert cleaner.first_dirty_offset(("t", 0), fresh) == 0
    assert cleaner.clean_once()
    assert {k: v for _, k, v in read_log(fresh)} == latest_per_key(written)


def test_a_truncation_below_the_checkpoint_makes_the_regrown_part_dirty(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(**COMPACT))
    write_keys(log, 2_000, 10)
    finish_segment(log)
    cleaner = cleaner_for(log)
    assert cleaner.clean_once()
    assert cleaner.first_dirty_offset(("t", 0), log) == 2_000
    write_keys(log, 500, 10, start=2_000)
    finish_segment(log)
    assert log.truncate_to(1_990)  # an unclean election: the log is cut below the cleaner's checkpoint
    assert log.log_end_offset == 1_990
    # what grows again below the old checkpoint (1990-1999) repeats one key: it must be cleaned too
    regrown = [(b"dup", f"d{i}".encode()) for i in range(10)] + [(b"other", f"o{i}".encode()) for i in range(500)]
    for b in range(0, len(regrown), 10):
        log.append(keyed_batch(regrown[b:b + 10]))
    finish_segment(log)
    assert cleaner.first_dirty_offset(("t", 0), log) == 1_990
    assert cleaner.clean_once()
    assert [(k, v) for _, k, v in read_log(log)] == [(b"dup", b"d9"), (b"other", b"o499")]
