"""ProduceFastPath against a real Log: its answers are byte for byte what the general Produce encoder
writes, it declines every request shape it does not handle, and a refused append writes nothing."""

from __future__ import annotations

import asyncio
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import build_batch, produce_body  # noqa: E402

from ferry.broker.log.log import Log  # noqa: E402
from ferry.broker.server.metadata_cache import MetadataCache  # noqa: E402
from ferry.broker.server.partition import Partition  # noqa: E402
from ferry.broker.server.produce_fast_path import ProduceFastPath  # noqa: E402
from ferry.broker.server.replica_manager import ReplicaManager  # noqa: E402
from ferry.wire.protocol import produce  # noqa: E402
from ferry.wire.protocol.errors import ErrorCode  # noqa: E402
from ferry.wire.protocol.primitives import Writer  # noqa: E402
from ferry.zk.znodes import PartitionState  # noqa: E402

TOPIC, PARTITION = "page_view", 3


def frame(body: bytes, version: int, client_id: str | None = "t", correlation_id: int = 7) -> bytearray:
    head = struct.pack(">hhi", 0, version, correlation_id) + bytes(Writer().string(client_id).buf)
    return bytearray(head + body)


@pytest.fixture
def log(tmp_path):
    lg = Log(tmp_path / f"{TOPIC}-{PARTITION}")
    yield lg
    lg.close()


class _Flusher:
    def __init__(self, flushed_to) -> None:
        self.flushed_to = flushed_to


def fast_path(log: Log, flushed_to=None) -> ProduceFastPath:
    """The fast path over a real ReplicaManager leading the one partition (a single-replica ISR)."""
    async def flush(lg, end):
        lg.flush(end)

    replicas = ReplicaManager(1, MetadataCache(), log_manager=None)
    part = replicas.partitions[(TOPIC, PARTITION)] = Partition(TOPIC, PARTITION, 1, log)
    part.make_leader(PartitionState(1, 0, (1,)), 0, (1,), 0)
    return ProduceFastPath(replicas, _Flusher(flushed_to or flush))


@pytest.mark.parametrize("version", [3, 4, 5, 6, 7, 8])
def test_answer_is_what_the_general_encoder_writes(log, version):
    fp = fast_path(log)
    for i in range(3):
        batch = build_batch([b"v%d-%d" % (i, j) for j in range(5)])
        body = fp.handle(frame(produce_body(TOPIC, PARTITION, batch, acks=1, version=version), version), version)
        expected = produce.encode_response(version, [(TOPIC, [produce.PartitionProduceResult(
            PARTITION, 0, base_offset=5 * i, log_append_time=-1, log_start_offset=0)])])
        assert body == expected
    assert log.log_end_offset == 15


def test_acks_all_answers_after_the_flush(log):
    fp = fast_path(log)
    batch = build_batch([b"a", b"b"])
    result = fp.handle(frame(produce_body(TOPIC, PARTITION, batch, acks=-1), 8), 8)
    assert asyncio.iscoroutine(result)
    body = asyncio.run(result)
    assert log.flushed_offset == 2
    assert body == produce.encode_response(8, [(TOPIC, [produce.PartitionProduceResult(
        PARTITION, 0, base_offset=0, log_start_offset=0)])])


def test_a_failed_flush_is_answered_with_a_storage_error(log):
    async def failing(lg, end):
        raise OSError("disk gone")

    fp = fast_path(log, failing)
    result = fp.handle(frame(produce_body(TOPIC, PARTITION, build_batch([b"x"]), acks=-1), 8), 8)
    body = asyncio.run(result)
    from ferry.wire.protocol.primitives import Reader

    r = Reader(body)
    assert r.int32() == 1 and r.string() == TOPIC and r.int32() == 1 and r.int32() == PARTITION
    assert r.int16() == ErrorCode.KAFKA_STORAGE_ERROR


def test_declines_what_it_does_not_handle(log):
    fp = fast_path(log)
    batch = build_batch([b"x"])

    def two_partitions() -> bytes:
        w = Writer().string(None).int16(1).int32(5000).array_len(1).string(TOPIC).array_len(2)
        w.int32(PARTITION).bytes_(batch).int32(PARTITION + 1).bytes_(batch)
        return bytes(w.buf)

    def transactional() -> bytes:
        w = Writer().string("txn").int16(-1).int32(5000).array_len(1).string(TOPIC).array_len(1)
        w.int32(PARTITION).bytes_(batch)
        return bytes(w.buf)

    declined = {
        "acks=0": produce_body(TOPIC, PARTITION, batch, acks=0),
        "two partitions": two_partitions(),
        "transactional id": transactional(),
        "unknown partition": produce_body(TOPIC, PARTITION + 1, batch, acks=1),
        "null records": produce_body(TOPIC, PARTITION, None, acks=1),
        "truncated": produce_body(TOPIC, PARTITION, batch, acks=1)[:-3],
    }
    for what, body in declined.items():
        assert fp.handle(frame(body, 8), 8) is None, what
    assert fp.handle(frame(b"", 8), 8) is None
    assert log.log_end_offset == 0


def test_a_refused_append_writes_nothing_and_defers_to_the_general_path(log):
    fp = fast_path(log)
    bad = bytearray(build_batch([b"x", b"y"]))
    bad[-1] ^= 0xFF  # breaks the CRC-32C
    assert fp.handle(frame(produce_body(TOPIC, PARTITION, bytes(bad), acks=1), 8), 8) is None
    assert log.log_end_offset == 0 and log.segments[-1].size == 0
    good = build_batch([b"z"])
    assert fp.handle(frame(produce_body(TOPIC, PARTITION, good, acks=1), 8), 8) is not None
    assert log.log_end_offset == 1
