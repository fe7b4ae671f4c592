"""Uncompressed RecordBatch v2 batches concatenated into one, and their records counted per time bucket.

The mirror coalesces runs of small batches (a producer's 50-record batches would otherwise cap it at 5 x 50
records per round trip). ``concat_records`` writes ONE new batch holding the records of whole uncompressed
CreateTime batches, walking each record once: its varint prefix is written anew (length, attributes,
timestampDelta against the new base timestamp = the first batch's, offsetDelta = the running index) and its
key, value and headers bytes are copied as they are, so every record reads back with the same key, value,
headers and timestamp. The new header: baseOffset 0, partitionLeaderEpoch -1 (the target's to set),
attributes 0, lastOffsetDelta = records - 1, maxTimestamp = the largest record timestamp, the given
producer id / epoch / base sequence, CRC-32C. In the same walk each record's timestamp is counted in its
bucket (``bucket_ms``), so the caller need not read the records again to audit them.

The walk is strict, a subset of what aiokafka's reader accepts: a record that does not parse, a header key
that is not UTF-8, a null length other than -1, a timestamp below 0 (-1 is "no timestamp"), bytes left
after a record or after the last one raise RecordWalkError (a ValueError; ``out`` is left as it was), and
the caller takes its general path instead. The CRC-32C of the source batches is checked only with
``check_crcs=True`` (each just before its records are walked, while it is in the cache; a mismatch raises
CorruptRecordError with the batch's offset): the mirror passes it for the batches its scan of the fetch
answer left unchecked.

The work is done by the Cython module ``_batch_concat`` (the native part ``batch_concat``, ferry.wire.native);
without it, by the pure-Python twin below (same bytes, same counts; tests compare the two), several times
slower. ``FERRY_NATIVE_DISABLE=batch_concat`` forces the Python twin.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c

from ferry.wire import native
from ferry.wire.record.errors import CorruptRecordError
from ferry.wire.record.record_batch import batch_crc

_native = native.load("batch_concat")  # None: not built (no C compiler) or switched off, the pure-Python twin
NATIVE = _native is not None

Buffer = bytes | bytearray | memoryview
Buckets = dict[int, int]  # bucket start (ms) -> records

_HEADER = 61
_MIN_RECORD = 7  # length, attributes, timestampDelta, offsetDelta, key, value, header count: a byte each
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_CRC = struct.Struct(">I")
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count (after the CRC)
_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic


class RecordWalkError(ValueError):
    """Records that the strict walk does not take (see the module docstring); nothing was written."""


def concat_records(out: bytearray, sources: Sequence[Buffer], producer_id: int, producer_epoch: int,
                   base_sequence: int, bucket_ms: int, check_crcs: bool = False) -> tuple[int, int, Buckets]:
    """Append one batch holding the records of ``sources`` to ``out``; (records, maxTimestamp, buckets)."""
    crc_error = CorruptRecordError if check_crcs else None
    try:
        if _native is not None:
            return _native.concat(out, list(sources), producer_id, producer_epoch, base_sequence, bucket_ms,
                                  crc_error)
        return _concat_py(out, sources, producer_id, producer_epoch, base_sequence, bucket_ms, check_crcs)
    except (RecordWalkError, CorruptRecordError):
        raise
    except ValueError as e:
        raise RecordWalkError(str(e)) from None


def count_records(batch: Buffer, bucket_ms: int) -> tuple[int, Buckets]:
    """(records, buckets) of one whole uncompressed CreateTime v2 batch, by the same strict walk."""
    try:
        if _native is not None:
            return _native.count(batch, bucket_ms)
        walk = _Walk(bucket_ms)
        _walk_py(bytes(batch), 0, walk, None)
        return walk.records, walk.buckets
    except RecordWalkError:
        raise
    except ValueError as e:
        raise RecordWalkError(str(e)) from None


# ---------------------------------------------------------------- the pure-Python twin of _batch_concat.pyx

class _Walk:
    __slots__ = ("bucket_ms", "buckets", "max_ts", "records")

    def __init__(self, bucket_ms: int) -> None:
        self.bucket_ms = bucket_ms
        self.buckets: Buckets = {}
        self.max_ts = -1
        self.records = 0


def _varint(b: bytes, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varint at ``pos`` (at most 10 bytes, all before ``end``) -> (value, position after it)."""
    value = shift = 0
    while True:
        if pos >= end:
            raise RecordWalkError("a varint runs past its end")
        byte = b[pos]
        pos += 1
        if shift == 63 and byte > 1:
            raise RecordWalkError("a varint has bits past 64")
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (value >> 1) ^ -(value & 1), pos


def _zigzag(v: int) -> bytes:
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _skip(b: bytes, pos: int, end: int, nullable: bool, what: str) -> int:
    n, pos = _varint(b, pos, end)
    if n < -1 or (n == -1 and not nullable):
        raise RecordWalkError(f"{what} length {n}")
    if n > end - pos:
        raise RecordWalkError(f"{what} of {n} bytes runs past the record's end")
    return pos + max(n, 0)


def _walk_py(b: bytes, new_base: int, walk: _Walk, dst: bytearray | None) -> None:
    """Walk one whole batch's records (and with ``dst``, append them re-prefixed)."""
    size = len(b)
    off = _I64.unpack_from(b, 0)[0] if size >= 8 else -1
    if size < _HEADER or b[16] != 2:
        raise RecordWalkError(f"batch at offset {off}: not a whole v2 batch")
    attrs, _, base_ts, _, _, _, _, count = _TAIL.unpack_from(b, 21)
    if attrs & 0x2F:
        raise RecordWalkError(f"batch at offset {off}: attributes {attrs:#x}: only uncompressed CreateTime "
                              "data batches are walked")
    if count < 1 or count > (size - _HEADER) // _MIN_RECORD:
        raise RecordWalkError(f"batch at offset {off}: {count} records cannot fit in {size - _HEADER} bytes")
    pos = _HEADER
    buckets, bucket_ms = walk.buckets, walk.bucket_ms
    for i in range(count):
        try:
            length, pos = _varint(b, pos, size)
            if length < _MIN_RECORD - 1 or length > size - pos:
                raise RecordWalkError("record length does not parse or runs past the batch")
            rec_end = pos + length
            attr = b[pos]
            if attr & 0x80:
                raise RecordWalkError(f"record attributes byte {attr:#x}")
            ts_delta, pos = _varint(b, pos + 1, rec_end)
            _, pos = _varint(b, pos, rec_end)
            rest = pos
            pos = _skip(b, pos, rec_end, True, "key")
            pos = _skip(b, pos, rec_end, True, "value")
            n, pos = _varint(b, pos, rec_end)
            if n < 0:
                raise RecordWalkError("header count is negative")
            for _ in range(n):
                klen, pos = _varint(b, pos, rec_end)
                if klen < 0 or klen > rec_end - pos:
                    raise RecordWalkError("a header key length is negative or runs past the record")
                try:
                    b[pos:pos + klen].decode("utf-8")
                except UnicodeDecodeError:
                    raise RecordWalkError("a header key is not UTF-8") from None
                pos = _skip(b, pos + klen, rec_end, True, "header value")
            if pos != rec_end:
                raise RecordWalkError(f"{rec_end - pos} bytes left over in the record")
            ts = base_ts + ts_delta
            if ts >= 1 << 63:
                raise RecordWalkError("timestamp overflows")
            if ts < 0:
                raise RecordWalkError(f"timestamp {ts} (none or before the epoch)")
        except RecordWalkError as e:
            raise RecordWalkError(f"batch at offset {off}, record {i}: {e}") from None
        walk.max_ts = max(walk.max_ts, ts)
        bk = ts - ts % bucket_ms
        buckets[bk] = buckets.get(bk, 0) + 1
        if dst is not None:
            delta, index = _zigzag(ts - new_base), _zigzag(walk.records)
            dst += _zigzag(1 + len(delta) + len(index) + rec_end - rest)
            dst.append(attr)
            dst += delta
            dst += index
            dst += b[rest:rec_end]
        walk.records += 1
    if pos != size:
        raise RecordWalkError(f"batch at offset {off}: {size - pos} bytes after the last record")


def _check_crc(b: bytes) -> None:
    if len(b) < _HEADER:
        raise CorruptRecordError(f"a batch of {len(b)} bytes is shorter than a batch header", -1)
    crc, header = batch_crc(b, 0, len(b)), _CRC.unpack_from(b, 17)[0]
    if crc != header:
        off = _I64.unpack_from(b, 0)[0]
        raise CorruptRecordError(f"batch at offset {off}: CRC-32C {crc:#010x} != header {header:#010x}", off)


def _concat_py(out: bytearray, sources: Sequence[Buffer], producer_id: int, producer_epoch: int,
               base_sequence: int, bucket_ms: int, check_crcs: bool = False) -> tuple[int, int, Buckets]:
    if not sources:
        raise RecordWalkError("nothing to concatenate")
    batches = [bytes(s) for s in sources]
    new_base = _I64.unpack_from(batches[0], 27)[0] if len(batches[0]) >= _HEADER else 0
    if new_base < 0:
        raise RecordWalkError(f"base timestamp {new_base} (none or before the epoch)")
    walk = _Walk(bucket_ms)
    body = bytearray()
    for b in batches:
        if check_crcs:
            _check_crc(b)
        _walk_py(b, new_base, walk, body)
    if walk.records > 0x7FFFFFFF or _HEADER + len(body) - 12 > 0x7FFFFFFF:
        raise RecordWalkError(f"{walk.records} records, {_HEADER + len(body)} bytes: too many for one batch")
    start = len(out)
    out += _PREFIX.pack(0, _HEADER + len(body) - 12, -1, 2)
    out += b"\0\0\0\0"  # the CRC, below
    out += _TAIL.pack(0, walk.records - 1, new_base, walk.max_ts, producer_id, producer_epoch, base_sequence,
                      walk.records)
    out += body
    struct.pack_into(">I", out, start + 17, crc32c.crc32c(memoryview(out)[start + 21:]))
    return walk.records, walk.max_ts, walk.buckets
