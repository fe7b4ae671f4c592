"""Compaction test helpers: keyed batches (kafka-python's builder) and a reader that decodes a whole log."""

from __future__ import annotations

import time

from kafka.record.default_records import DefaultRecordBatchBuilder

from ferry.broker.log.log import Log
from tests.wire.storage_batches import decode


def keyed_batch(pairs: list[tuple[bytes | None, bytes | None]], *, codec: int = 0, timestamp: int | None = None,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                transactional: bool = False) -> bytes:
    """One v2 batch of (key, value) records; a None value is a tombstone."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=1 << 30)
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    for i, (key, value) in enumerate(pairs):
        builder.append(i, timestamp=ts, key=key, value=value, headers=[])
    return bytes(builder.build())


def read_log(log: Log, start: int | None = None, max_bytes: int = 1 << 20) -> list[tuple[int, bytes | None,
                                                                                       bytes | None]]:
    """(offset, key, value) of every data record from ``start`` (default: the log start) to the high watermark,
    read as a consumer does; offsets must only grow."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = log.log_start_offset if start is None else start
    for _ in range(1_000_000):
        fs = log.read(offset, max_bytes)
        if fs is None:
            return out
        batches = list(decode(fs.read_bytes()))
        assert batches
        for batch, records in batches:
            if batch.is_control_batch:
                continue
            for r in records:
                if r.offset < offset:
                    continue
                assert not out or r.offset > out[-1][0], f"offset went back: {r.offset} after {out[-1][0]}"
                out.append((r.offset, r.key, r.value))
        offset = batches[-1][0].next_offset
    raise AssertionError("read loop did not end")


def latest_per_key(written: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    for key, value in written:
        latest[key] = value
    return latest
