"""WriteTxnMarkers (key 27), version 0 (v1 is flexible): a transaction coordinator asks a partition leader to
append commit or abort markers (control batches) for producers' transactions. Served to other brokers; the
coordinator sends it (client side below) for partitions that another broker leads."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.header import Buffers
from ferry.wire.protocol.primitives import Reader, Writer

VERSION = 0


@dataclass(slots=True)
class TxnMarker:
    producer_id: int
    producer_epoch: int
    committed: bool
    topics: list[tuple[str, list[int]]]
    coordinator_epoch: int = 0


def parse_request(r: Reader, version: int) -> list[TxnMarker]:
    def marker(r: Reader) -> TxnMarker:
        pid, epoch, committed = r.int64(), r.int16(), r.boolean()
        topics = r.topic_partition_ids()
        return TxnMarker(pid, epoch, committed, topics, r.int32())

    return r.array(marker)


def encode_response(version: int, results: list[tuple[int, list[tuple[str, list[tuple[int, int]]]]]]) -> bytes:
    """results: [(producer id, [(topic, [(partition, error code)])])]."""
    w = Writer().array_len(len(results))
    for pid, topics in results:
        w.int64(pid).partition_errors(topics)
    return bytes(w.buf)


# ---------------------------------------------------------------------- client side (the coordinator)


def encode_request(markers: list[TxnMarker]) -> tuple[int, int, Buffers]:
    w = Writer().array_len(len(markers))
    for m in markers:
        w.int64(m.producer_id).int16(m.producer_epoch).boolean(m.committed).topic_partition_ids(m.topics)
        w.int32(m.coordinator_epoch)
    return ApiKey.WRITE_TXN_MARKERS, VERSION, [w.buf]


def parse_response(body: memoryview | bytes) -> dict[int, dict[tuple[str, int], int]]:
    """{producer id: {(topic, partition): error code}}."""
    r = Reader(body)
    out: dict[int, dict[tuple[str, int], int]] = {}
    for _ in range(max(r.array_len(), 0)):
        pid = r.int64()
        out.setdefault(pid, {}).update(r.partition_errors())
    return out
