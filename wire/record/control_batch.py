"""Control batches: the transaction markers (KIP-98) a partition leader appends when a transaction ends.

A marker is a RecordBatch v2 with the control and transactional attribute bits, the producer's id and epoch,
baseSequence -1 and one record: key = ControlRecordType (version int16 0, type int16: 0 ABORT, 1 COMMIT),
value = EndTransactionMarker (version int16 0, coordinatorEpoch int32). Never compressed, so its type can be
read from fixed positions after the header (``control_type``).
"""

from __future__ import annotations

import struct
import time

import crc32c

from ferry.wire.record.record_batch import BATCH_HEADER_SIZE, CONTROL_MASK, TRANSACTIONAL_MASK

ABORT = 0
COMMIT = 1

_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
# record: length, attributes 0, timestampDelta 0, offsetDelta 0, keyLength 4, key, valueLength 6, value, headers 0
_RECORD = bytes([(1 + 1 + 1 + 1 + 4 + 1 + 6 + 1) << 1, 0, 0, 0, 4 << 1])
# the key's type sits after the record's length, attributes, timestamp and offset deltas, key length, version
_TYPE_AT = BATCH_HEADER_SIZE + 5 + 2
CONTROL_PREFIX = _TYPE_AT + 2  # bytes of a control batch that ``control_type`` needs


def build_marker(producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int = 0,
                 timestamp_ms: int | None = None) -> bytes:
    """One control batch (baseOffset 0: the leader assigns it) ending the producer's transaction."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    record = (_RECORD + _KEY.pack(0, COMMIT if committed else ABORT) + bytes([6 << 1])
              + _VALUE.pack(0, coordinator_epoch) + b"\x00")
    tail = _TAIL.pack(CONTROL_MASK | TRANSACTIONAL_MASK, 0, ts, ts, producer_id, producer_epoch, -1, 1)
    crc = crc32c.crc32c(record, crc32c.crc32c(tail))
    return _HEAD.pack(0, 9 + len(tail) + len(record), -1, 2, crc) + tail + record


def control_type(batch: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """ABORT or COMMIT of the control batch at ``pos`` (its first ``CONTROL_PREFIX`` bytes suffice); -1 when the
    bytes are not a marker this code knows."""
    if len(batch) - pos < CONTROL_PREFIX:
        return -1
    return struct.unpack_from(">h", batch, pos + _TYPE_AT)[0]
