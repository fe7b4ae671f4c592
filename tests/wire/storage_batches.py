"""Storage test helpers: real RecordBatch v2 bytes built with kafka-python's own builder, and its
decoder as the oracle."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def build_batch(
    count: int = 1,
    *,
    codec: int = 0,
    timestamp: int | None = None,
    value_size: int = 100,
    values: list[bytes] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One v2 batch of ``count`` records (generated values unless ``values`` is given)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=1 << 30,
    )
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    if values is None:
        # compressible (kafka-python stores a batch uncompressed when compression does not pay)
        # but distinct per record and per batch
        tag = os.urandom(4).hex()
        values = [(f"{tag}-{i} " * (value_size // 8 + 1)).encode()[:value_size] for i in range(count)]
    for i, value in enumerate(values):
        builder.append(i, timestamp=ts, key=str(i).encode(), value=value, headers=[])
    return bytes(builder.build())


def decode(data: bytes) -> Iterator[tuple[object, list]]:
    """Oracle: kafka-python's decoder over ``data``; every batch's CRC must validate."""
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc(), f"CRC of batch at offset {batch.base_offset} does not validate"
        yield batch, list(batch)
