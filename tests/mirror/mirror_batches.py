"""Build RecordBatch v2 bytes with kafka-python's builder (an independent implementation of the format)."""

from __future__ import annotations

import struct

import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]  # timestamp, key, value, headers

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def build_batch(records: list[Record], base_offset: int = 0, codec: str = "none", producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False) -> bytes:
    b = DefaultRecordBatchBuilder(2, CODECS[codec], transactional, producer_id, producer_epoch, base_sequence,
                                  batch_size=1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, ts, key, value, headers)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, 7)  # a partition leader epoch, as a broker would set
    return bytes(buf)


def make_control(batch: bytes) -> bytes:
    """Turn a batch into a (transactional) control batch: attributes bits and a fresh CRC."""
    buf = bytearray(batch)
    attrs = struct.unpack_from(">h", buf, 21)[0] | 0x20 | 0x10
    struct.pack_into(">h", buf, 21, attrs)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def records(n: int, start_ts: int, prefix: str = "m", step_ms: int = 1) -> list[Record]:
    return [(start_ts + i * step_ms, f"k{i}".encode() if i % 3 else None, f"{prefix}-{i}".encode() * (1 + i % 5),
             [("ferry.host", b"h1"), ("i", str(i).encode())] if i % 2 else []) for i in range(n)]
