"""Log append and read on real files: offsets, segment rolls, whole-batch reads, timestamps."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ferry.broker.log.log import Log
from ferry.wire.log_config import LogConfig
from ferry.wire.record.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogOffsetOutOfRangeError,
    RecordTooLargeError,
)
from tests.wire.storage_batches import CODECS, build_batch, decode


def segment_files(log: Log) -> list[Path]:
    return sorted(log.dir.glob("*.log"))


def all_offsets_on_disk(log: Log) -> list[int]:
    """Every record offset in every segment file, decoded by kafka-python (CRCs checked)."""
    offsets = []
    for path in segment_files(log):
        for _, records in decode(path.read_bytes()):
            offsets.extend(r.offset for r in records)
    return offsets


def read_all(log: Log, start: int, max_bytes: int = 1 << 20) -> list[int]:
    """Fetch loop like a consumer's: offsets of the records from ``start`` to the high watermark."""
    offsets: list[int] = []
    offset = start
    for _ in range(100_000):
        fs = log.read(offset, max_bytes)
        if fs is None:
            return offsets
        batches = list(decode(fs.read_bytes()))
        assert batches, "a slice holds at least one whole batch"
        assert batches[0][0].base_offset == fs.first_offset
        for _, records in batches:
            offsets.extend(r.offset for r in records if r.offset >= offset)
        offset = batches[-1][0].next_offset
    raise AssertionError("read loop did not end")


def test_offsets_consecutive_across_appends_and_rolls(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=4000, index_interval_bytes=300))
    expected = 0
    for i in range(200):
        n = 1 + i % 5
        info = log.append(build_batch(n))
        assert (info.first_offset, info.last_offset, info.duplicate) == (expected, expected + n - 1, False)
        expected += n
    assert log.log_end_offset == expected
    files = segment_files(log)
    assert len(files) > 5
    assert files[0].name == "00000000000000000000.log"
    assert all(len(p.stem) == 20 and p.stem.isdigit() for p in files)
    assert [int(p.stem) for p in files] == [s.base_offset for s in log.segments]
    assert all(p.stat().st_size <= 4000 for p in files)
    assert all_offsets_on_disk(log) == list(range(expected))
    log.close()


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_kafka_python_reads_our_segments(tmp_path: Path, codec: str) -> None:
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=20_000))
    sent = []
    for _ in range(30):
        values = [f"{codec} value {len(sent) + j}".encode() * 20 for j in range(7)]
        sent.extend(values)
        log.append(build_batch(values=values, codec=CODECS[codec]))
    log.flush()
    got = []
    for path in segment_files(log):
        for batch, records in decode(path.read_bytes()):
            assert batch.compression_type == CODECS[codec]
            got.extend((r.offset, r.value) for r in records)
    assert got == list(enumerate(sent))
    log.close()


def test_append_does_not_modify_callers_buffer(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    log.append(build_batch(3))
    payload = bytearray(build_batch(2))
    before = bytes(payload)
    info = log.append(payload)
    assert info.first_offset == 3 and bytes(payload) == before
    log.append(memoryview(build_batch(1)))
    assert log.log_end_offset == 6
    log.close()


def test_read_returns_whole_batches_from_the_middle_of_a_batch(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=500))
    for _ in range(50):
        log.append(build_batch(10))
    log.flush()
    fs = log.read(237, 1 << 20)
    assert fs is not None and fs.first_offset == 230
    batches = list(decode(fs.read_bytes()))
    assert batches[0][0].base_offset == 230
    assert batches[-1][0].next_offset == 500
    # every offset, through the index: the slice starts with the batch holding it
    for offset in range(0, 500, 7):
        fs = log.read(offset, 1)
        assert fs is not None and fs.first_offset == offset - offset % 10
        [(batch, records)] = list(decode(fs.read_bytes()))  # max_bytes=1: exactly one whole batch
        assert batch.base_offset <= offset <= batch.base_offset + 9
    log.close()


def test_read_max_bytes_cuts_at_batch_boundaries(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=1000))
    sizes = []
    for i in range(40):
        data = build_batch(1 + i % 3, value_size=200)
        sizes.append(len(data))
        log.append(data)
    log.flush()
    for max_bytes in (sizes[0], sizes[0] + sizes[1] - 1, sizes[0] + sizes[1], 3000, 10**6):
        fs = log.read(0, max_bytes)
        assert fs is not None
        # the largest whole-batch prefix that fits, but at least one batch
        total, n = 0, 0
        while n < len(sizes) and total + sizes[n] <= max_bytes:
            total += sizes[n]
            n += 1
        assert fs.size == max(total, sizes[0])
        assert len(list(decode(fs.read_bytes()))) == max(n, 1)
    log.close()


def test_first_batch_larger_than_max_bytes_is_returned(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    big = build_batch(50, value_size=1000)
    log.append(big)
    log.append(build_batch(1))
    log.flush()
    fs = log.read(10, 100)
    assert fs is not None and fs.size == len(big) and fs.first_offset == 0
    log.close()


def test_reads_across_segments(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=3000, index_interval_bytes=200))
    for i in range(100):
        log.append(build_batch(1 + i % 4))
    log.flush()
    assert len(log.segments) > 3
    assert read_all(log, 0) == list(range(log.log_end_offset))
    assert read_all(log, 77) == list(range(77, log.log_end_offset))
    # a slice never spans segments
    seg = log.segments[1]
    fs = log.read(seg.base_offset, 1 << 20)
    assert fs is not None and fs.first_offset == seg.base_offset and fs.size == seg.size
    log.close()


def test_read_bounds(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    for _ in range(5):
        log.append(build_batch(4))
    # consumers see flushed data only
    assert log.high_watermark == 0
    assert log.read(0, 1 << 20) is None
    log.flush()
    assert log.high_watermark == log.flushed_offset == 20
    log.append(build_batch(4))
    assert log.log_end_offset == 24 and log.high_watermark == 20
    fs = log.read(0, 1 << 20)
    assert fs is not None and [b.next_offset for b, _ in decode(fs.read_bytes())][-1] == 20
    assert log.read(20, 1 << 20) is None
    assert log.read(24, 1 << 20) is None  # at the log end: nothing yet, not an error
    # explicit upper bound
    fs = log.read(0, 1 << 20, upper_bound=8)
    assert fs is not None and [b.base_offset for b, _ in decode(fs.read_bytes())] == [0, 4]
    fs = log.read(0, 1 << 20, upper_bound=24)
    assert fs is not None and [b.next_offset for b, _ in decode(fs.read_bytes())][-1] == 24
    with pytest.raises(LogOffsetOutOfRangeError):
        log.read(25, 1 << 20)
    with pytest.raises(LogOffsetOutOfRangeError):
        log.read(-1, 1 << 20)
    assert LogOffsetOutOfRangeError.kafka_error_code == 1
    log.close()


def test_consumers_see_unflushed(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(consumers_see_unflushed=True))
    seen = []
    log.add_high_watermark_listener(lambda lg: seen.append(lg.high_watermark))
    log.append(build_batch(3))
    assert log.flushed_offset == 0 and log.high_watermark == 3 and seen == [3]
    assert read_all(log, 0) == [0, 1, 2]
    log.close()


def test_flush_listener_and_flush_up_to(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    seen = []
    log.add_high_watermark_listener(lambda lg: seen.append(lg.high_watermark))
    log.append(build_batch(3))
    assert log.needs_flush(now_ms=10**15)
    assert log.flush(3) == 3 and seen == [3]
    assert log.flush(3) == 3 and seen == [3]  # already flushed: no fsync, no event
    assert not log.needs_flush(now_ms=10**15)
    log.close()


def test_flush_messages_threshold(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(flush_interval_messages=10, flush_interval_ms=10**9))
    requested = []
    log.flush_requested = requested.append
    log.append(build_batch(6))
    assert not log.needs_flush() and not requested
    log.append(build_batch(6))
    assert log.needs_flush() and requested == [log]
    assert log.maybe_flush() and log.flushed_offset == 12
    log.close()


def test_bad_appends_write_nothing(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(max_message_bytes=5000))
    log.append(build_batch(2))
    size = log.size_in_bytes
    corrupt = bytearray(build_batch(2))
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(build_batch(1) + bytes(corrupt))  # one good batch, one bad: all refused
    with pytest.raises(RecordTooLargeError):
        log.append(build_batch(10, value_size=1000))
    with pytest.raises(InvalidRecordError):
        log.append(b"")
    with pytest.raises(CorruptRecordError):
        log.append(b"\x00" * 100)
    assert log.log_end_offset == 2 and log.size_in_bytes == size
    assert log.append(build_batch(1)).first_offset == 2
    log.close()


def test_payload_larger_than_segment(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=1000))
    with pytest.raises(RecordTooLargeError):
        log.append(build_batch(20, value_size=100))


def test_several_batches_in_one_append(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0")
    info = log.append(build_batch(2) + build_batch(3, codec=CODECS["gzip"]) + build_batch(1))
    assert (info.first_offset, info.last_offset) == (0, 5)
    log.flush()
    assert read_all(log, 0) == list(range(6))
    log.close()


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=5000, index_interval_bytes=300))
    base = 1_700_000_000_000
    for i in range(100):
        log.append(build_batch(2, timestamp=base + 1000 * i))
    log.flush()
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (0, base)
    assert log.offset_for_timestamp(base) == (0, base)
    assert log.offset_for_timestamp(base + 1) == (2, base + 1000)
    for i in (17, 50, 99):
        assert log.offset_for_timestamp(base + 1000 * i) == (2 * i, base + 1000 * i)
        assert log.offset_for_timestamp(base + 1000 * i - 500) == (2 * i, base + 1000 * i)
    assert log.offset_for_timestamp(base + 100_000) is None
    # bounded by the high watermark
    log.append(build_batch(1, timestamp=base + 200_000))
    assert log.offset_for_timestamp(base + 150_000) is None
    assert log.offset_for_timestamp(base + 150_000, upper_bound=log.log_end_offset) == (200, base + 200_000)
    log.close()
    # the time index survives a reopen
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=5000, index_interval_bytes=300))
    assert log.offset_for_timestamp(base + 1000 * 37) == (74, base + 37_000)
    log.close()


def test_timestamps_out_of_order(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    for ts in (100, 300, 200, 400, 250):
        log.append(build_batch(1, timestamp=ts))
    log.flush()
    assert log.offset_for_timestamp(150) == (1, 300)
    assert log.offset_for_timestamp(350) == (3, 400)
    assert log.offset_for_timestamp(401) is None
    log.close()


def test_concurrent_appends_and_flushes(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=50_000, index_interval_bytes=1000))
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                log.flush()
                assert log.flushed_offset <= log.log_end_offset
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(500):
            log.append(build_batch(1 + i % 3))
    finally:
        stop.set()
        t.join(timeout=30)
    assert not errors
    log.flush()
    assert read_all(log, 0) == list(range(log.log_end_offset)) == all_offsets_on_disk(log)
    log.close()


def test_roll_by_age(tmp_path: Path) -> None:
    now = [1_000_000]
    log = Log(tmp_path / "t-0", LogConfig(segment_ms=1000), now_ms=lambda: now[0])
    log.append(build_batch(1, timestamp=now[0]))
    assert not log.roll_if_needed()
    now[0] += 500
    log.append(build_batch(1, timestamp=now[0]))
    assert len(log.segments) == 1
    now[0] += 1000
    log.append(build_batch(1, timestamp=now[0]))  # the active segment is 1.5 s old: roll first
    assert [s.base_offset for s in log.segments] == [0, 2]
    now[0] += 1001
    assert log.roll_if_needed()
    assert [s.base_offset for s in log.segments] == [0, 2, 3]
    assert not log.roll_if_needed()  # the new active segment is empty
    log.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_offset_for_timestamp_is_the_first_record_at_or_after(tmp_path: Path, codec: str) -> None:
    """Inside a batch, the answer is the first record whose own timestamp reaches the target (records of
    one batch may be out of order: negative timestamp deltas)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    log = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    log.append(build_batch(3, timestamp=1_000))
    b = DefaultRecordBatchBuilder(magic=2, compression_type=CODECS[codec], is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, ts in enumerate((5_000, 4_000, 7_000, 6_000, 9_000)):  # offsets 3..7
        b.append(i, timestamp=ts, key=None, value=b"v%d" % i * 20, headers=[])
    log.append(bytes(b.build()))
    log.flush()
    assert log.offset_for_timestamp(1_000) == (0, 1_000)
    assert log.offset_for_timestamp(1_001) == (3, 5_000)
    assert log.offset_for_timestamp(5_500) == (5, 7_000)
    assert log.offset_for_timestamp(6_500) == (5, 7_000)
    assert log.offset_for_timestamp(8_000) == (7, 9_000)
    assert log.offset_for_timestamp(9_001) is None
    log.close()


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_log_append_time_stamps_each_batch(tmp_path: Path, codec: str) -> None:
    """message.timestamp.type=LogAppendTime: the broker marks each batch and sets its maxTimestamp to the
    append time (the CRC recomputed); readers then give every record that time."""
    clock = [1_800_000_000_000]
    log = Log(tmp_path / "t-0", LogConfig.from_topic_config({"message.timestamp.type": "LogAppendTime"}),
              now_ms=lambda: clock[0])
    info = log.append(build_batch(3, codec=CODECS[codec], timestamp=5_000))
    assert info.log_append_time == clock[0]
    clock[0] += 10
    log.append(build_batch(2, timestamp=6_000) + build_batch(1, timestamp=7_000))
    log.flush()
    data = b"".join(p.read_bytes() for p in sorted(log.dir.glob("*.log")))
    batches = list(decode(data))  # the oracle checks every CRC
    assert [b.timestamp_type for b, _ in batches] == [1, 1, 1]
    assert [[r.timestamp for r in rs] for _, rs in batches] == [[clock[0] - 10] * 3, [clock[0]] * 2, [clock[0]]]
    assert [[r.offset for r in rs] for _, rs in batches] == [[0, 1, 2], [3, 4], [5]]
    assert log.offset_for_timestamp(clock[0]) == (3, clock[0])
    log.close()
    reopened = Log(tmp_path / "t-0")  # recovery reads the stamped headers back
    assert reopened.offset_for_timestamp(clock[0]) == (3, clock[0])
    reopened.close()


def test_timestamp_type_must_be_known() -> None:
    with pytest.raises(ValueError, match="message.timestamp.type"):
        LogConfig.from_topic_config({"message.timestamp.type": "WallClock"})
