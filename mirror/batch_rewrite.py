"""Forward fetched RecordBatch v2 bytes as the mirror's own idempotent batches, without decoding records.

A Fetch answer holds whole batches, and the first may start before the requested offset (the log is read
from the batch that contains it). For each batch we

* check its CRC-32C first: recomputing the CRC on a corrupted batch would launder the corruption;
* skip it if it ends below the offset we want (already mirrored), and skip control batches (they belong
  to the source's transactions, not to the data);
* copy it and rewrite producerId / producerEpoch / baseSequence to the mirror's producer, clear the
  transactional bit, reset baseOffset and partitionLeaderEpoch (the target broker assigns both), and
  recompute the CRC-32C over attributes..end.

Keys, values, headers, timestamps and the compressed payload stay byte-identical. Sequences advance by
``lastOffsetDelta + 1`` per batch (Kafka's rule), so the target broker's idempotence check recognises the
mirror's own retries of the same batches.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import crc32c

from broker.record.record_batch import BATCH_HEADER_SIZE, RecordBatchHeader, read_header

# Byte positions in a v2 batch (Kafka's DefaultRecordBatch layout).
_BASE_OFFSET_POS = 0
_LEADER_EPOCH_POS = 12
_MAGIC_POS = 16
_CRC_POS = 17
_ATTRIBUTES_POS = 21  # the CRC covers [attributes, end of batch)
_PRODUCER_ID_POS = 43  # producerId int64, producerEpoch int16, baseSequence int32
_LOG_OVERHEAD = 12  # baseOffset + batchLength, not counted by batchLength

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_PRODUCER = struct.Struct(">qhi")

TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
NO_PARTITION_LEADER_EPOCH = -1
SEQUENCE_MODULUS = 1 << 31  # sequences wrap at Int32.MaxValue like Kafka's


class CorruptBatchError(ValueError):
    """A fetched batch that is not a valid v2 batch (bad magic, length or CRC-32C)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass(slots=True)
class ForwardedBatches:
    """The outcome of rewriting one partition's fetched bytes."""

    records: bytearray  # rewritten batches, ready for a Produce request (empty if nothing to forward)
    headers: list[RecordBatchHeader] = field(default_factory=list)  # source headers of forwarded batches
    spans: list[tuple[int, int]] = field(default_factory=list)  # (position, size) of each in `records`
    resume_offsets: list[int] = field(default_factory=list)  # source offset to fetch again if it is not acked
    next_offset: int = 0  # source offset after everything consumed (forwarded or skipped)
    next_sequence: int = 0  # the mirror's sequence after the forwarded batches
    messages: int = 0  # records forwarded (sum of recordsCount)
    skipped_batches: int = 0  # below the wanted offset, control, or empty
    truncated: bool = False  # the bytes ended inside a batch (a fetch size limit cut it)

    @property
    def empty(self) -> bool:
        return not self.headers


def next_sequence(sequence: int, header: RecordBatchHeader) -> int:
    """The sequence after ``header``'s batch: one per offset it spans (compacted batches have gaps)."""
    return (sequence + header.last_offset_delta + 1) % SEQUENCE_MODULUS


def forward_batches(
    data: bytes | bytearray | memoryview,
    fetch_offset: int,
    producer_id: int,
    producer_epoch: int,
    sequence: int,
) -> ForwardedBatches:
    """Rewrite the batches of ``data`` at or after ``fetch_offset`` for the mirror's producer.

    ``sequence`` is the mirror's next sequence for the target partition. A batch that straddles
    ``fetch_offset`` (only possible if someone set the offset inside a batch) is forwarded whole:
    duplicates are acceptable, loss is not. Raises CorruptBatchError on a bad batch; batches before
    it are not returned either, so the caller retries the whole fetch.
    """
    mv = data if isinstance(data, memoryview) else memoryview(data)
    total = len(mv)
    out = ForwardedBatches(records=bytearray(), next_offset=fetch_offset, next_sequence=sequence)
    records = out.records
    pos = 0
    while pos < total:
        if total - pos < BATCH_HEADER_SIZE:
            out.truncated = True
            break
        h = read_header(mv, pos)
        if h.magic != 2:
            raise CorruptBatchError(f"batch at offset {h.base_offset} has magic {h.magic}; only v2 is mirrored",
                                    h.base_offset)
        if h.batch_length < BATCH_HEADER_SIZE - _LOG_OVERHEAD:
            raise CorruptBatchError(f"batch at offset {h.base_offset} has batchLength {h.batch_length}",
                                    h.base_offset)
        size = h.size
        if pos + size > total:
            out.truncated = True
            break
        batch = mv[pos:pos + size]
        pos += size
        if h.next_offset <= out.next_offset:
            out.skipped_batches += 1  # already mirrored (the fetch started inside or before it)
            continue
        crc = crc32c.crc32c(batch[_ATTRIBUTES_POS:])
        if crc != h.crc:
            raise CorruptBatchError(
                f"batch at offset {h.base_offset}: CRC-32C {crc:#010x} != header {h.crc:#010x}", h.base_offset)
        resume = out.next_offset
        out.next_offset = h.next_offset
        if h.attributes & CONTROL_MASK or h.records_count == 0:
            out.skipped_batches += 1
            continue
        start = len(records)
        records += batch
        _I64.pack_into(records, start + _BASE_OFFSET_POS, 0)
        _I32.pack_into(records, start + _LEADER_EPOCH_POS, NO_PARTITION_LEADER_EPOCH)
        _I16.pack_into(records, start + _ATTRIBUTES_POS, h.attributes & ~TRANSACTIONAL_MASK)
        _PRODUCER.pack_into(records, start + _PRODUCER_ID_POS, producer_id, producer_epoch, out.next_sequence)
        _U32.pack_into(records, start + _CRC_POS,
                       crc32c.crc32c(memoryview(records)[start + _ATTRIBUTES_POS:start + size]))
        out.headers.append(h)
        out.spans.append((start, size))
        out.resume_offsets.append(resume)
        out.messages += h.records_count
        out.next_sequence = next_sequence(out.next_sequence, h)
    return out


def restamp(records: bytearray, start: int, size: int, producer_id: int, producer_epoch: int,
            sequence: int) -> None:
    """Re-stamp one rewritten batch for another producer id / sequence and fix its CRC-32C."""
    _PRODUCER.pack_into(records, start + _PRODUCER_ID_POS, producer_id, producer_epoch, sequence)
    mv = memoryview(records)
    try:
        _U32.pack_into(records, start + _CRC_POS, crc32c.crc32c(mv[start + _ATTRIBUTES_POS:start + size]))
    finally:
        mv.release()


def resequence(records: bytearray, spans: list[tuple[int, int]], producer_id: int, producer_epoch: int,
               sequence: int, headers: list[RecordBatchHeader]) -> int:
    """Re-stamp already rewritten batches for a new producer id (after the target forgot ours).

    Returns the sequence after the last batch. Cheaper than re-fetching: only the header fields and the
    CRC change.
    """
    for (start, size), h in zip(spans, headers, strict=True):
        restamp(records, start, size, producer_id, producer_epoch, sequence)
        sequence = next_sequence(sequence, h)
    return sequence
