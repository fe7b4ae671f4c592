"""RecordBatch v2 (magic 2) headers: parse, validate, assign offsets and leader epochs.

The broker never looks inside a batch: it checks the 61-byte header and the CRC-32C, rewrites the
8-byte baseOffset and stores the bytes as they came (paper 3.1, "no per-message work"). The CRC
covers the bytes from ``attributes`` to the end of the batch, so rewriting baseOffset (and
partitionLeaderEpoch) does not invalidate it.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from ferry.wire import native
from ferry.wire.record.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError

_crc32c_part = native.load("crc32c")
if _crc32c_part is not None:  # batch_bytes.h's CRC (three streams: _crc32c.pyx); else the package's
    _native_crc32c = _crc32c_part.crc32c

    def _crc32c(data: memoryview) -> int:
        return _native_crc32c(data, 0, True)  # other threads (a broker's flushers) run meanwhile on large ones

else:
    _crc32c = crc32c.crc32c  # releases the interpreter lock on 32 KiB or more

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = HEADER_STRUCT.size  # 61
assert BATCH_HEADER_SIZE == 61

LOG_OVERHEAD = 12  # baseOffset + batchLength: the part batchLength does not count
BASE_OFFSET_STRUCT = struct.Struct(">q")
SIZE_PREFIX_STRUCT = struct.Struct(">qi")  # baseOffset, batchLength
# baseOffset, batchLength, partitionLeaderEpoch: the 16 bytes before magic, none covered by the CRC
EPOCH_PREFIX_STRUCT = struct.Struct(">qii")
PARTITION_LEADER_EPOCH_POS = 12
PARTITION_LEADER_EPOCH_STRUCT = struct.Struct(">i")
NO_PARTITION_LEADER_EPOCH = -1
LAST_OFFSET_DELTA_POS = 23
MAX_TIMESTAMP_POS = 35
CRC_POS = 17
ATTRIBUTES_POS = 21  # the CRC covers [ATTRIBUTES_POS, end of batch)
MAGIC_POS = 16
CURRENT_MAGIC = 2
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
LEGACY_MIN_LENGTH = 14  # smallest v0 message: what a size below means garbage, not an old format

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

NO_PRODUCER_ID = -1


class RecordBatchHeader(NamedTuple):
    """The fixed 61-byte header of a v2 batch, fields in wire order.

    A tuple, not a frozen dataclass: it is made for every batch of every produce request, and a frozen
    dataclass's __init__ (13 object.__setattr__ calls) cost 5-9% of the broker's CPU (py-spy).
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch on disk and on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (sequences wrap at 2**31 - 1 like Kafka's)."""
        if self.base_sequence < 0:
            return self.base_sequence
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


_make_header = RecordBatchHeader._make


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> RecordBatchHeader:
    """Parse the header at ``pos``; CorruptRecordError if fewer than 61 bytes remain."""
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated record batch header at byte {pos}: {len(buf) - pos} bytes, need {BATCH_HEADER_SIZE}"
        )
    return _make_header(HEADER_STRUCT.unpack_from(buf, pos))


def batch_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of a batch's covered bytes (attributes .. end)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return _crc32c(mv[pos + ATTRIBUTES_POS : pos + size])


def check_header(h: RecordBatchHeader, pos: int, available: int) -> None:
    """Structural checks of one header that needs ``available`` bytes from ``pos`` to hold the batch."""
    if h.batch_length < LEGACY_MIN_LENGTH or not 0 <= h.magic <= CURRENT_MAGIC:
        raise CorruptRecordError(
            f"bytes at {pos} are not a record batch (batchLength {h.batch_length}, magic {h.magic})"
        )
    if h.magic != CURRENT_MAGIC:
        # v0/v1 message sets keep their magic at the same byte; Produce v3+ must carry v2 batches.
        raise InvalidRecordError(f"record batch at byte {pos} has magic {h.magic}; only magic 2 is supported")
    if h.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch at byte {pos} has batchLength {h.batch_length} < {MIN_BATCH_LENGTH}")
    if h.size > available:
        raise CorruptRecordError(
            f"record batch at byte {pos} claims {h.size} bytes but only {available} remain"
        )
    if h.last_offset_delta < 0 or h.records_count < 0 or h.last_offset_delta + 1 < h.records_count:
        raise CorruptRecordError(
            f"record batch at byte {pos}: lastOffsetDelta {h.last_offset_delta} "
            f"inconsistent with recordsCount {h.records_count}"
        )


def validate_batches(
    buf: bytes | bytearray | memoryview, max_batch_bytes: int | None = None, allow: int = 0, check_crcs: bool = True
) -> list[RecordBatchHeader]:
    """Check a whole produce payload: concatenated v2 batches, each complete, CRC-32C correct.

    Raises CorruptRecordError (bad framing or CRC), InvalidRecordError (not magic 2, empty,
    no records, a control or transactional batch unless ``allow`` has its attribute bit:
    TRANSACTIONAL_MASK for a transactional produce, both for markers and a follower's copy) or
    RecordTooLargeError (a batch over ``max_batch_bytes``). Returns the headers in order. ``check_crcs`` False:
    the caller computed every batch's CRC-32C itself a moment ago (the embedded mirror's walk), all else checked.
    """
    refused = (CONTROL_MASK | TRANSACTIONAL_MASK) & ~allow
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    total = len(mv)
    if total == 0:
        raise InvalidRecordError("empty record set")
    headers: list[RecordBatchHeader] = []
    pos = 0
    unpack = HEADER_STRUCT.unpack_from
    make = _make_header
    limit = 0x7FFFFFFF if max_batch_bytes is None else max_batch_bytes
    while pos < total:
        if total - pos < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"{total - pos} trailing bytes at byte {pos} are too short for a record batch header"
            )
        h = make(unpack(mv, pos))
        size = h.batch_length + LOG_OVERHEAD
        # One combined test for the common, valid case; _reject() says precisely what is wrong.
        if (h.magic != CURRENT_MAGIC or h.batch_length < MIN_BATCH_LENGTH or size > total - pos or size > limit
                or h.records_count <= 0 or h.last_offset_delta + 1 < h.records_count
                or h.attributes & refused):
            _reject(h, pos, total - pos, max_batch_bytes, refused)
        if check_crcs and (crc := _crc32c(mv[pos + ATTRIBUTES_POS : pos + size])) != h.crc:
            raise CorruptRecordError(f"record batch at byte {pos}: CRC-32C is {crc:#010x}, header says {h.crc:#010x}")
        headers.append(h)
        pos += size
    return headers


def _reject(h: RecordBatchHeader, pos: int, available: int, max_batch_bytes: int | None,
            refused: int = CONTROL_MASK | TRANSACTIONAL_MASK) -> None:
    """Raise the error that describes what is wrong with the header at ``pos``."""
    check_header(h, pos, available)
    if max_batch_bytes is not None and h.size > max_batch_bytes:
        raise RecordTooLargeError(f"record batch of {h.size} bytes exceeds max.message.bytes {max_batch_bytes}")
    if h.records_count == 0:
        raise InvalidRecordError(f"record batch at byte {pos} has no records")
    if h.attributes & refused & CONTROL_MASK:
        raise InvalidRecordError(f"record batch at byte {pos} is a control batch; clients may not send those")
    if h.attributes & refused & TRANSACTIONAL_MASK:
        raise InvalidRecordError(f"record batch at byte {pos} is transactional but the request has no "
                                 "transactional id")
    raise CorruptRecordError(f"record batch at byte {pos} has an inconsistent header")


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int,
                               headers: list[RecordBatchHeader] | None = None) -> None:
    """Rewrite every batch's partitionLeaderEpoch in ``buf`` in place (the CRC does not cover it).

    ``headers`` (from validate_batches) saves re-parsing."""
    if headers is None:
        headers = validate_batches(buf)
    pos = 0
    pack = PARTITION_LEADER_EPOCH_STRUCT.pack_into
    for h in headers:
        pack(buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)
        pos += h.size


def assign_offsets(buf: bytearray | memoryview, base_offset: int,
                   headers: list[RecordBatchHeader] | None = None) -> int:
    """Rewrite the baseOffset of every batch in ``buf`` in place, consecutively from ``base_offset``.

    ``headers`` (from validate_batches) saves re-parsing. Returns the next offset to assign.
    """
    if headers is None:
        headers = validate_batches(buf)
    pos = 0
    offset = base_offset
    pack = BASE_OFFSET_STRUCT.pack_into
    for h in headers:
        pack(buf, pos, offset)
        offset += h.last_offset_delta + 1
        pos += h.size
    return offset
