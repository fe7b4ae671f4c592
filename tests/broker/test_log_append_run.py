"""The leader append of a payload of many batches (the embedded mirror's copied answer: ~800 batches of one
producer per 8 MiB) against the same batches appended one at a time: the same segment and index files, the same
producer state and duplicate answers. And the run writer (broker/log/_append_native.pyx ``write_run``) against
its pure-Python twin: the same bytes, the same failures, nothing written for a buffer that is not whole batches."""

from __future__ import annotations

import errno
import os
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import build_batch  # noqa: E402

from ferry.broker.log import log_append  # noqa: E402
from ferry.broker.log.log import Log  # noqa: E402
from ferry.wire.log_config import LogConfig  # noqa: E402
from tests.wire import native_parts  # noqa: E402

needs_native = native_parts.needs_native("append")
PID = 4242
CONFIG = dict(index_interval_bytes=150, segment_bytes=1 << 20)


def writers() -> list:
    native = log_append.native_write_run
    return [log_append.write_run_py] + ([native] if native is not None else [])


def one_producer(n: int, epoch: int = 3, first_seq: int = 0, ts: int = 1_700_000_000_000) -> list[bytes]:
    """``n`` batches of one producer and epoch with consecutive sequences and timestamps that go back now and
    then (the time index keeps the largest so far)."""
    out, seq = [], first_seq
    for i in range(n):
        values = [b"v%d-%d" % (i, j) * (1 + i % 4) for j in range(1 + i % 3)]
        base = ts + (i * 10 if i % 5 else i * 10 - 500)
        out.append(bytes(build_batch(values, base_timestamp=base, producer_id=PID, producer_epoch=epoch,
                                     base_sequence=seq)))
        seq += len(values)
    return out


def files(lg: Log) -> dict[str, bytes]:
    lg.flush()
    for seg in lg.segments:
        seg.indexes.write_pending()
    return {p.name: p.read_bytes() for p in sorted(lg.dir.iterdir()) if p.suffix in (".log", ".index", ".timeindex")}


def state(lg: Log) -> dict:
    return {pid: (e.epoch, [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches])
            for pid, e in lg.producer_state.producers.items()}


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("check_sequences", [True, False])
def test_a_run_writes_and_indexes_what_one_batch_at_a_time_does(tmp_path, monkeypatch, native, check_sequences):
    if native and log_append.native_write_run is None:
        pytest.skip("native part append is off")
    from ferry.broker.log import log_segment
    monkeypatch.setattr(log_segment, "write_run", log_append.native_write_run if native else log_append.write_run_py)
    batches = one_producer(40)
    one = Log(tmp_path / "one-0", LogConfig(**CONFIG), now_ms=lambda: 5)
    run = Log(tmp_path / "run-0", LogConfig(**CONFIG), now_ms=lambda: 5)
    try:
        for b in batches:
            one.append(b, leader_epoch=2, check_sequences=check_sequences)
        infos = [run.append(b"".join(batches[:17]), leader_epoch=2, check_sequences=check_sequences),
                 run.append(b"".join(batches[17:]), leader_epoch=2, check_sequences=check_sequences)]
        split, total = sum(1 + i % 3 for i in range(17)), sum(1 + i % 3 for i in range(40))
        assert [(i.first_offset, i.last_offset, i.duplicate) for i in infos] == [
            (0, split - 1, False), (split, total - 1, False)]
        assert run.log_end_offset == one.log_end_offset == total
        a, b = files(one), files(run)
        assert a == b
        assert len(a["00000000000000000000.index"]) >= 15 * 8  # an entry every two or three batches
        assert len(a["00000000000000000000.timeindex"]) >= 5 * 12
        assert state(run) == state(one) and len(state(run)[PID][1]) == 5
        assert run.producer_state.updates == one.producer_state.updates == 40
        assert run.segments[-1].max_timestamp == one.segments[-1].max_timestamp
        # the indexes lead reads to the same places
        for offset in (0, 17, split - 1, split, 61, total - 1):
            assert run.read(offset, 1 << 20).read_bytes() == one.read(offset, 1 << 20).read_bytes()
        # recovery indexes batch by batch (SegmentIndexes.recovered): the entries it makes are the run's
        run.close()
        for p in run.dir.iterdir():
            if p.suffix in (".index", ".timeindex") or p.name.endswith(".snapshot"):
                p.unlink()
        run = Log(tmp_path / "run-0", LogConfig(**CONFIG), now_ms=lambda: 5, recovery_point=0)
        assert files(run) == a
    finally:
        one.close()
        run.close()


def test_a_repeated_batch_in_a_run_is_a_duplicate_and_nothing_is_written(tmp_path):
    batches = one_producer(12)
    lg = Log(tmp_path / "t-0", LogConfig(**CONFIG))
    try:
        lg.append(b"".join(batches), leader_epoch=0, check_sequences=False)
        end, size = lg.log_end_offset, lg.segments[-1].size
        # a later payload holding one of the producer's last five batches: the first append's offsets
        again = lg.append(b"".join(batches[9:11]), leader_epoch=0, check_sequences=False)
        assert again.duplicate and (again.first_offset, again.last_offset) == (
            state(lg)[PID][1][2][2], state(lg)[PID][1][2][3])
        assert (lg.log_end_offset, lg.segments[-1].size) == (end, size)
        # older than the five retained: not known as a duplicate (Kafka's window), refused as out of sequence
        # when sequences are checked, appended by the mirror (which never sends it: its position comes first)
        from ferry.wire.record.errors import OutOfOrderSequenceError
        with pytest.raises(OutOfOrderSequenceError):
            lg.append(b"".join(batches[2:4]), leader_epoch=0)
        assert lg.log_end_offset == end
        # another epoch's batches with the same sequences are not duplicates
        other = one_producer(2, epoch=4)
        info = lg.append(b"".join(other), leader_epoch=0, check_sequences=False)
        assert not info.duplicate and info.first_offset == end
        assert state(lg)[PID][0] == 4 and len(state(lg)[PID][1]) == 2
    finally:
        lg.close()


def test_a_run_of_two_producers_or_epochs_keeps_each_producers_state(tmp_path):
    mixed = one_producer(3, epoch=1) + one_producer(7, epoch=2) + [
        bytes(build_batch([b"x"], producer_id=PID + 1, producer_epoch=0, base_sequence=0)),
        bytes(build_batch([b"plain"]))]
    one = Log(tmp_path / "one-0", LogConfig(**CONFIG), now_ms=lambda: 5)
    run = Log(tmp_path / "run-0", LogConfig(**CONFIG), now_ms=lambda: 5)
    try:
        for b in mixed:
            one.append(b, leader_epoch=0, check_sequences=False)
        run.append(b"".join(mixed), leader_epoch=0, check_sequences=False)
        assert files(run) == files(one)
        assert state(run) == state(one)
        assert set(state(run)) == {PID, PID + 1} and state(run)[PID][0] == 2
    finally:
        one.close()
        run.close()


@needs_native
@pytest.mark.parametrize("leader_epoch", [-1, 0, 7])
def test_native_run_write_writes_what_the_python_one_does(tmp_path, leader_epoch):
    batches = one_producer(1100)  # more than one pwritev of 512 batches
    buf = memoryview(bytearray(b"".join(batches)))
    before = bytes(buf)
    outs = []
    for write in writers():
        path = tmp_path / write.__name__
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        try:
            assert write(fd, buf, 1000, leader_epoch, 0) == 1000 + sum(1 + i % 3 for i in range(1100))
            assert write(fd, batches[0], 7, leader_epoch, len(buf)) == 8
        finally:
            os.close(fd)
        outs.append(path.read_bytes())
    assert bytes(buf) == before  # the caller's buffer is not changed
    assert outs[0] == outs[1] and len(outs[0]) == len(buf) + len(batches[0])
    assert struct.unpack_from(">q", outs[0], len(batches[0]))[0] == 1001
    if leader_epoch >= 0:
        assert struct.unpack_from(">i", outs[0], 12)[0] == leader_epoch


@needs_native
def test_native_run_write_fails_as_the_python_one_does(tmp_path):
    good = b"".join(one_producer(3))
    path = tmp_path / "f"
    path.write_bytes(b"")
    for write in writers():
        fd = os.open(path, os.O_RDONLY)
        try:
            with pytest.raises(OSError) as e:
                write(fd, good, 0, -1, 0)
            assert e.value.errno == errno.EBADF
        finally:
            os.close(fd)
        fd = os.open(path, os.O_RDWR)
        try:
            for bad in (good[:-1], good + b"\0" * 20, good[:8] + b"\0\0\0\1" + good[12:]):
                with pytest.raises(ValueError, match="not whole record batches"):
                    write(fd, bad, 0, -1, 0)
                assert path.stat().st_size == 0  # nothing written
        finally:
            os.close(fd)
