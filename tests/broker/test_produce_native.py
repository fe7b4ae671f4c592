"""The native one-batch produce path (broker/server/_produce_native.pyx, broker/log/_append_native.pyx) against its
pure-Python twins: the same parse of good and bad requests (fuzzed too), the same bytes written, and through the
fast path on real Logs the same answers and byte-identical log files; a bad batch is declined with nothing
written, so the general path answers it with the error it always did."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import struct
import sys
from pathlib import Path

import crc32c
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import build_batch, produce_body  # noqa: E402

from ferry.broker.log import log_append, log_segment  # noqa: E402
from ferry.broker.log.log import Log  # noqa: E402
from ferry.broker.server import produce_fast_path, produce_parse  # noqa: E402
from ferry.broker.server.metadata_cache import MetadataCache  # noqa: E402
from ferry.broker.server.partition import Partition  # noqa: E402
from ferry.broker.server.produce_fast_path import ProduceFastPath  # noqa: E402
from ferry.broker.server.replica_manager import ReplicaManager  # noqa: E402
from ferry.wire.protocol.primitives import Writer  # noqa: E402
from ferry.wire.record.errors import CorruptRecordError, InvalidRecordError  # noqa: E402
from ferry.wire.record.record_batch import validate_batches  # noqa: E402
from ferry.zk.znodes import PartitionState  # noqa: E402
from tests.wire import native_parts  # noqa: E402

TOPIC, PARTITION = "page_view", 3
native = produce_parse.native_module
native_write = log_append.native_write_batches
needs_native = native_parts.needs_native("produce", "append")


def frame(body: bytes, version: int = 8, client_id: str | None = "t", correlation_id: int = 7) -> bytearray:
    head = struct.pack(">hhi", 0, version, correlation_id) + bytes(Writer().string(client_id).buf)
    return bytearray(head + body)


def request(records: bytes | None, acks: int = 1, version: int = 8, **kw) -> bytearray:
    return frame(produce_body(TOPIC, PARTITION, records, acks=acks, version=version), version, **kw)


def _bad_batches() -> dict[str, bytes]:
    good = bytes(build_batch([b"a", b"b"]))
    out = {}
    b = bytearray(good)
    b[-1] ^= 0xFF
    out["bad crc"] = bytes(b)
    b = bytearray(good)
    b[16] = 1
    out["magic 1"] = bytes(b)
    b = bytearray(good)
    b[16] = 3
    out["magic 3"] = bytes(b)
    out["truncated batch"] = good[:-5]
    out["short header"] = good[:40]
    b = bytearray(good)
    struct.pack_into(">i", b, 57, 0)  # no records (the CRC covers it: fixed below)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    out["no records"] = bytes(b)
    b = bytearray(good)
    struct.pack_into(">h", b, 21, 0x20)  # a control batch
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    out["control"] = bytes(b)
    b = bytearray(good)
    struct.pack_into(">h", b, 21, 0x10)  # transactional, without a transactional id
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    out["transactional"] = bytes(b)
    b = bytearray(good)
    struct.pack_into(">i", b, 8, 40)  # batchLength below the header's
    out["short batch length"] = bytes(b)
    return out


def _requests() -> list[bytearray]:
    one = bytes(build_batch([b"x" * 200]))
    idem = bytes(build_batch([b"i1", b"i2"], producer_id=5, producer_epoch=0, base_sequence=0))
    out = [request(one, acks=a, version=v) for v in range(3, 9) for a in (1, -1)]
    out += [request(one, acks=0), request(one, version=2), request(one, version=9), request(one, client_id=None),
            request(one + one), request(idem), request(None), request(b""), request(one)[:-3], bytearray(),
            frame(b"", 8), request(bytes(build_batch([b"z"] * 50, compression=1)))]
    out += [request(b) for b in _bad_batches().values()]
    return out


@needs_native
def test_native_parse_is_the_python_parse():
    for fr in _requests():
        assert native.parse(fr) == produce_parse.parse_py(fr), bytes(fr[:40])
        assert native.parse(bytes(fr)) == native.parse(memoryview(fr))
    parsed = native.parse(request(bytes(build_batch([b"x"]))))
    assert parsed is not None and type(parsed[7]) is type(produce_parse.parse_py(request(bytes(build_batch([b"x"]))))[7])


@needs_native
def test_native_parse_matches_on_fuzzed_requests():
    rng = random.Random(20)
    base = [request(bytes(build_batch([b"v" * rng.randrange(0, 300) for _ in range(rng.randrange(1, 4))])))
            for _ in range(8)]
    for i in range(4000):
        fr = bytearray(rng.choice(base))
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(fr))
            fr[at] = rng.randrange(256) if i % 3 else fr[at] ^ 1
        if i % 7 == 0:
            fr = fr[:rng.randrange(len(fr) + 1)]
        assert native.parse(fr) == produce_parse.parse_py(fr), (i, bytes(fr).hex())


def test_a_header_is_given_only_for_one_batch_validate_batches_accepts():
    """Whatever parse checks itself, validate_batches would refuse: a batch parse does not vouch for goes to the
    log's general append (which raises the precise error)."""
    for what, records in _bad_batches().items():
        p = produce_parse.parse(request(records))
        assert p is not None and p[7] is None, what
        with pytest.raises((CorruptRecordError, InvalidRecordError)):
            validate_batches(records)
    one = bytes(build_batch([b"x"]))
    assert produce_parse.parse(request(one + one))[7] is None  # two batches: the general append
    assert produce_parse.parse(request(one))[7] == validate_batches(one)[0]


@needs_native
@pytest.mark.parametrize("leader_epoch", [-1, 0, 7])
def test_native_write_writes_what_the_python_write_does(tmp_path, leader_epoch):
    buf = bytearray(b"junk") + build_batch([b"p", b"q"]) + bytearray(b"tail")
    other = bytes(build_batch([b"r" * 300]))
    size = len(buf) - 8
    paths = []
    for name, write in (("native", native_write), ("python", log_append.write_batches_py)):
        path = tmp_path / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        try:
            write(fd, [(buf, 4, size, 1234, size - 12)], leader_epoch, 0)
            write(fd, [(buf, 4, size, 99, size - 12), (other, 0, len(other), 101, len(other) - 12)] * 3,
                  leader_epoch, size)
            write(fd, [], leader_epoch, 0)
        finally:
            os.close(fd)
        paths.append(path.read_bytes())
    assert paths[0] == paths[1] and len(paths[0]) == 4 * size + 3 * len(other)
    assert struct.unpack_from(">q", paths[0], size)[0] == 99


@needs_native
def test_native_write_fails_as_the_python_write_does(tmp_path):
    buf = build_batch([b"p"])
    path = tmp_path / "ro"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        for write in (native_write, log_append.write_batches_py):
            with pytest.raises(OSError) as e:
                write(fd, [(buf, 0, len(buf), 0, len(buf) - 12)], -1, 0)
            assert e.value.errno == errno.EBADF
            with pytest.raises(ValueError):
                write(fd, [(buf, 1, len(buf), 0, len(buf) - 12)], -1, 0)
            with pytest.raises(ValueError):
                write(fd, [(buf, 0, len(buf), 0, len(buf) - 12)] * 513, -1, 0)
    finally:
        os.close(fd)


def _fast_path(log: Log) -> ProduceFastPath:
    replicas = ReplicaManager(1, MetadataCache(), log_manager=None)
    part = replicas.partitions[(TOPIC, PARTITION)] = Partition(TOPIC, PARTITION, 1, log)
    part.make_leader(PartitionState(1, 0, (1,)), 0, (1,), 0)
    return ProduceFastPath(replicas, None)


def _run(tmp_path: Path, name: str, requests: list[bytearray]) -> tuple[list, dict[str, bytes]]:
    log = Log(tmp_path / name / f"{TOPIC}-{PARTITION}")
    fp = _fast_path(log)
    answers = [fp.handle_framed(bytearray(r)) for r in requests]
    log.close()
    files = {p.name: p.read_bytes() for p in sorted(log.dir.iterdir()) if p.suffix in (".log", ".index", ".timeindex")}
    return answers, files


@needs_native
def test_fast_path_native_and_python_answer_and_write_alike(tmp_path, monkeypatch):
    ts = 1_700_000_000_000
    reqs = []
    for i in range(300):
        reqs.append(request(bytes(build_batch([b"m%d" % i] * (1 + i % 3), base_timestamp=ts + i)), version=3 + i % 6))
        if i % 50 == 0:
            reqs.append(request(bytes(build_batch([b"a"], base_timestamp=ts)) * 2))  # two batches: general append
    seq = 0
    for i in range(20):  # an idempotent producer: in order, a duplicate, a gap (refused), in order again
        reqs.append(request(bytes(build_batch([b"s"] * 2, base_timestamp=ts, producer_id=9, producer_epoch=0,
                                              base_sequence=seq))))
        if i % 5 == 4:
            reqs.append(reqs[-1])
            reqs.append(request(bytes(build_batch([b"g"], base_timestamp=ts, producer_id=9, producer_epoch=0,
                                                  base_sequence=seq + 10))))
        seq += 2
    reqs += [request(b) for b in _bad_batches().values()]
    native_run = _run(tmp_path, "native", reqs)
    monkeypatch.setattr(produce_fast_path, "parse", produce_parse.parse_py)
    monkeypatch.setattr(log_segment, "write_batches", log_append.write_batches_py)
    python_run = _run(tmp_path, "python", reqs)
    assert native_run[0] == python_run[0]
    assert native_run[1] == python_run[1] and native_run[1]["00000000000000000000.log"]
    answered = [a for a in native_run[0] if a is not None]
    assert len(answered) == 300 + 6 + 20 + 4  # each refused (gap, bad batch) request declined: general path


@pytest.mark.parametrize("what", sorted(_bad_batches()))
def test_a_bad_batch_is_declined_with_nothing_written(tmp_path, what):
    log = Log(tmp_path / f"{TOPIC}-{PARTITION}")
    fp = _fast_path(log)
    assert fp.handle_framed(request(_bad_batches()[what])) is None
    assert log.log_end_offset == 0 and log.segments[-1].size == 0
    assert fp.handle_framed(request(bytes(build_batch([b"ok"])))) is not None and log.log_end_offset == 1
    log.close()


def test_a_failed_native_write_cuts_back_and_takes_the_log_offline(tmp_path, monkeypatch):
    """The write fails half way (EIO): the half is cut off, the log goes offline, nothing is counted."""
    log = Log(tmp_path / f"{TOPIC}-{PARTITION}")
    fp = _fast_path(log)
    assert fp.handle_framed(request(bytes(build_batch([b"one"])))) is not None
    size = log.segments[-1].size

    def torn(fd, items, leader_epoch, position):
        buf, pos, n = items[0][:3]
        os.pwrite(fd, bytes(memoryview(buf)[pos:pos + n // 2]), position)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(log_segment, "write_batches", torn)
    assert fp.handle_framed(request(bytes(build_batch([b"two"])))) is None
    assert log.offline and log.log_end_offset == 1
    assert os.path.getsize(log.segments[-1].log_path) == size
    log.close()


def _burst(ts: int) -> list[bytearray]:
    """A pipelining producer's requests: one-message requests in a row, some other shapes between them."""
    reqs = [request(bytes(build_batch([b"b%d" % i], base_timestamp=ts + i)), version=3 + i % 6) for i in range(40)]
    reqs.insert(10, request(bytes(build_batch([b"all"], base_timestamp=ts)), acks=-1))
    reqs.insert(20, request(_bad_batches()["bad crc"]))  # declined: the general path answers it
    reqs.insert(21, request(bytes(build_batch([b"idem"], base_timestamp=ts, producer_id=3, producer_epoch=0,
                                              base_sequence=0))))
    reqs.insert(30, request(bytes(build_batch([b"zero"], base_timestamp=ts)), acks=0))  # declined: not the shape
    return reqs


@pytest.mark.parametrize("native_parts", [True, False])
def test_a_run_answers_and_writes_as_one_request_at_a_time(tmp_path, monkeypatch, native_parts):
    """handle_run (a burst's requests to one partition appended with one write) gives the answers handle_framed
    gives one by one, writes the same log files, and stops before the first request it declines."""
    if not native_parts:
        monkeypatch.setattr(produce_fast_path, "parse", produce_parse.parse_py)
        monkeypatch.setattr(log_segment, "write_batches", log_append.write_batches_py)
    reqs = _burst(1_700_000_000_000)
    writes = []
    write = log_segment.write_batches
    monkeypatch.setattr(log_segment, "write_batches", lambda fd, items, *rest: (writes.append(len(items)),
                                                                                write(fd, items, *rest))[1])
    one_log = Log(tmp_path / "one" / f"{TOPIC}-{PARTITION}")
    one = _fast_path(one_log)
    singly = [one.handle_framed(bytearray(r)) for r in reqs]
    assert set(writes) == {1}
    writes.clear()
    run_log = Log(tmp_path / "run" / f"{TOPIC}-{PARTITION}")
    fp = _fast_path(run_log)
    together: list = []
    i = 0
    while i < len(reqs):
        got = fp.handle_run([bytearray(r) for r in reqs[i:]])
        together += got
        i += len(got)
        if i < len(reqs):
            assert fp.handle_framed(bytearray(reqs[i])) is None  # the one it stopped at is declined
            together.append(None)
            i += 1
    assert max(writes) >= 9 and len(writes) < 10  # bursts written with one write each
    for a in singly + together:
        if asyncio.iscoroutine(a):
            a.close()  # acks=-1: the flush is not the point here
    assert [type(a) for a in together] == [type(a) for a in singly]
    assert [a for a in together if type(a) is bytes] == [a for a in singly if type(a) is bytes]
    assert run_log.log_end_offset == one_log.log_end_offset == 40 + 2
    for lg in (one_log, run_log):
        lg.close()
    files = [{p.name: p.read_bytes() for p in lg.dir.iterdir() if p.suffix in (".log", ".index", ".timeindex")}
             for lg in (one_log, run_log)]
    assert files[0] == files[1]


def test_a_run_that_would_roll_the_segment_goes_one_by_one(tmp_path):
    from ferry.wire.log_config import LogConfig

    reqs = [request(bytes(build_batch([b"r%d" % i * 50], base_timestamp=1_700_000_000_000))) for i in range(30)]
    logs = []
    for name in ("one", "run"):
        lg = Log(tmp_path / name / f"{TOPIC}-{PARTITION}", LogConfig(segment_bytes=2_000, index_interval_bytes=100))
        fp = _fast_path(lg)
        answers = [fp.handle_framed(bytearray(r)) for r in reqs] if name == "one" else \
            fp.handle_run([bytearray(r) for r in reqs])
        assert len(answers) == 30 and all(type(a) is bytes for a in answers)
        logs.append((lg, answers))
    assert logs[0][1] == logs[1][1]
    assert [s.base_offset for s in logs[0][0].segments] == [s.base_offset for s in logs[1][0].segments]
    assert len(logs[0][0].segments) > 3
    for lg, _ in logs:
        lg.close()
    files = [{p.name: p.read_bytes() for p in lg.dir.iterdir() if p.suffix in (".log", ".index", ".timeindex")}
             for lg, _ in logs]
    assert files[0] == files[1]
