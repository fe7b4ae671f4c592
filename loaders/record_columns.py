"""Records of fetched message sets -> Arrow columns (the split reader's hot path).

``SplitRecords`` collects the records with offsets in ``[start, end)`` of the message sets a split's
MessageSetConsumer hands out (whole RecordBatch v2 bytes, CRC-32C already checked by the consumer) and
turns them into a ``pyarrow.RecordBatch`` with the ``format("ferry")`` columns: key, value, topic,
partition, offset, timestamp, headers.

Native path (ferry.loaders._batch_records): no Python object per record; key, value and header bytes are
copied once into Arrow buffers. Compressed batches are decompressed here (one call per batch) and their
records parsed natively. Fallback: aiokafka's reader, a tuple per record, then ``pa.array`` from lists.
``keys=False, headers=False`` leaves those columns null/empty (the load reads only values and timestamps).
"""

from __future__ import annotations

import struct
import time

import numpy as np
import pyarrow as pa

from ferry.client.message_set_consumer import record_batches
from ferry.loaders import native
from ferry.wire.record.compression import decompress

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                    ("partition", pa.int32()), ("offset", pa.int64()),
                    ("timestamp", pa.timestamp("us", tz="UTC")),
                    ("headers", pa.list_(pa.field("element", HEADER_TYPE)))])
_BATCH = struct.Struct(">qiibIhiqqqhii")
MAX_BATCH_RECORDS_BYTES = 1 << 30  # a compressed batch inflating beyond this is refused (corrupt or hostile)


def validity(valid: bytes, n: int) -> tuple[pa.Buffer | None, int]:
    """(Arrow validity bitmap or None when all valid, null count) from one byte per slot."""
    flags = np.frombuffer(valid, np.uint8, n)
    nulls = n - int(np.count_nonzero(flags))
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(flags, bitorder="little")), nulls


BINARY = pa.binary()


def binary_array(offsets: bytes, data: bytes, valid: bytes, n: int, kind: pa.DataType = BINARY) -> pa.Array:
    """An Arrow binary (or string) array over native buffers: int32 offsets, data, one validity byte per row."""
    bitmap, nulls = validity(valid, n)
    return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], nulls)


def timestamps_ms_to_us(stamps: np.ndarray) -> pa.Array:
    """Record timestamps (ms) as timestamp[us, UTC]; a negative one (none) is null."""
    missing = stamps < 0
    return pa.array(stamps * 1000, pa.int64(), mask=missing if missing.any() else None).cast(SCHEMA.field(
        "timestamp").type)


def constant_strings(text: str, n: int) -> pa.Array:
    """``n`` times ``text`` as a string array (one copy of the text per row, built in C++)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([text])).cast(pa.string())


class SplitRecords:
    """Collects the records of one split's message sets; ``take()`` returns them as one RecordBatch."""

    def __init__(self, topic: str, partition: int, start: int, end: int, *, keys: bool = True,
                 headers: bool = True) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end
        self.keys, self.headers = keys, headers
        mod = native.module("_batch_records")
        self._native = mod.RecordColumns(start, end, keys, headers) if mod is not None else None
        self._rows: list[tuple] = []
        self.seconds = 0.0  # CPU spent parsing (add + take): the load reports it as a stage

    @property
    def count(self) -> int:
        return self._native.count if self._native is not None else len(self._rows)

    def add(self, data: bytes) -> None:
        """Every record of the whole batches in ``data`` whose offset is in the split's range."""
        t0 = time.thread_time()
        try:
            self._add(data)
        finally:
            self.seconds += time.thread_time() - t0

    def take(self) -> pa.RecordBatch:
        """The records collected so far (in offset order) and a fresh start."""
        t0 = time.thread_time()
        try:
            return self._take() if self._native is not None else self._take_rows()
        finally:
            self.seconds += time.thread_time() - t0

    def _add(self, data: bytes) -> None:
        if self._native is None:
            self._add_rows(data)
            return
        cols, pos, size = self._native, 0, len(data)
        while pos < size:
            pos = cols.walk(data, pos)
            if size - pos < _BATCH.size:
                break
            (base, length, _, _, _, attributes, _, base_ts, max_ts, _, _, _, count) = _BATCH.unpack_from(data, pos)
            stop = pos + 12 + length
            if stop > size:
                break
            records = decompress(attributes & 0x07, memoryview(data)[pos + _BATCH.size: stop],
                                 MAX_BATCH_RECORDS_BYTES)
            cols.records(records, count, base, base_ts, max_ts if attributes & 0x08 else -1)
            pos = stop

    def _add_rows(self, data: bytes) -> None:
        start, end = self.start, self.end
        for base, last, recs in record_batches(data):
            if base < start or last >= end:
                recs = [r for r in recs if start <= r[0] < end]
            self._rows += recs

    def _take(self) -> pa.RecordBatch:
        got = self._native.take()
        n = got["count"]
        stamps = np.frombuffer(got["timestamps"], np.int64, n)
        if self.keys:
            keys = binary_array(got["key_offsets"], got["key_data"], got["key_valid"], n)
        else:
            keys = pa.nulls(n, pa.binary())
        if self.headers:
            h = got["n_headers"]
            entries = pa.StructArray.from_arrays(
                [binary_array(got["header_key_offsets"], got["header_key_data"], b"\x01" * h, h, pa.string()),
                 binary_array(got["header_value_offsets"], got["header_value_data"], got["header_value_valid"], h)],
                fields=list(HEADER_TYPE))
            if h:
                entries.field(0).validate(full=True)  # header keys must be UTF-8 (aiokafka decodes them)
            headers = pa.ListArray.from_arrays(pa.array(np.frombuffer(got["header_offsets"], np.int32, n + 1)),
                                               entries, type=SCHEMA.field("headers").type)
        else:
            headers = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADER_TYPE),
                                               type=SCHEMA.field("headers").type)
        return pa.RecordBatch.from_arrays([
            keys, binary_array(got["value_offsets"], got["value_data"], got["value_valid"], n),
            constant_strings(self.topic, n), pa.array(np.full(n, self.partition, np.int32)),
            pa.array(np.frombuffer(got["offsets"], np.int64, n)), timestamps_ms_to_us(stamps), headers],
            schema=SCHEMA)

    def _take_rows(self) -> pa.RecordBatch:
        rows, self._rows = self._rows, []
        n = len(rows)
        if not n:
            return pa.RecordBatch.from_pylist([], schema=SCHEMA)
        offsets, stamps, keys, values, headers = zip(*rows, strict=True)
        return pa.RecordBatch.from_arrays([
            pa.array(keys, pa.binary()) if self.keys else pa.nulls(n, pa.binary()), pa.array(values, pa.binary()),
            pa.array([self.topic] * n, pa.string()), pa.array([self.partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            timestamps_ms_to_us(np.array([-1 if t is None else t for t in stamps], np.int64)),
            pa.array(headers if self.headers else [[]] * n, SCHEMA.field("headers").type)], schema=SCHEMA)
