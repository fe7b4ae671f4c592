"""Forward fetched RecordBatch v2 bytes as the mirror's own idempotent batches, without decoding records.

A Fetch answer holds whole batches, and the first may start before the requested offset (the log is read
from the batch that contains it). For each batch we

* check its CRC-32C first: recomputing the CRC on a corrupted batch would launder the corruption;
* skip it if it ends below the offset we want (already mirrored), and skip control batches (they belong
  to the source's transactions, not to the data) and, read_committed, the batches of aborted transactions
  (the mirror fetches only up to the live last stable offset: an open transaction waits for its end);
* copy it and rewrite producerId / producerEpoch / baseSequence to the mirror's producer, clear the
  transactional bit, reset baseOffset and partitionLeaderEpoch (the target broker assigns both), and
  recompute the CRC-32C over attributes..end.

Keys, values, headers, timestamps and the compressed payload stay byte-identical. Sequences advance by
``lastOffsetDelta + 1`` per batch (Kafka's rule), so the target broker's idempotence check recognises the
mirror's own retries of the same batches.

Small batches are coalesced (``coalesce_bytes``): the offline broker remembers only 5 batches per producer
and partition, so at most 5 can be in flight, and a producer sending 50-message batches would cap the
mirror at 250 messages per fsync'd round trip. Consecutive dense CreateTime batches of one codec, each under
COALESCE_MAX_SOURCE bytes, up to ``coalesce_bytes`` together, become one batch: same records (key, value,
headers, timestamp), same codec, fresh offset deltas. Uncompressed runs are concatenated natively
(ferry.wire.record.batch_concat: each record's varint prefix rewritten, its key/value/headers bytes copied),
and the same walk counts the records per audit bucket (``counts``: the ack needs no second walk); runs that
walk refuses, compressed runs, and every run when the native module is not built are decoded and re-built by
aiokafka's C builder (counted on ack). Once built, a coalesced batch is kept and resent byte-identical like
any other. Whatever does not re-build (records that do not parse, a non-UTF-8 header key) is forwarded
batch by batch, unchanged. A coalesced batch the target refuses as too large is dropped and its sources
fetched again with a smaller ``coalesce_bytes`` (MirrorStream does that; ``coalesced`` says which forwarded
batches are re-built).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import crc32c
from aiokafka.errors import KafkaError
from aiokafka.record._crecords.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from ferry.client.audit.bucket import BUCKET_MS, NO_TIMESTAMP
from ferry.wire import native
from ferry.wire.record import batch_concat
from ferry.wire.record.errors import CorruptRecordError
from ferry.wire.record.read_committed import ReadCommitted
from ferry.wire.record.record_batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_POS,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    RecordBatchHeader,
    read_header,
)

# Byte positions in a v2 batch (Kafka's DefaultRecordBatch layout).
_BASE_OFFSET_POS = 0
_LEADER_EPOCH_POS = 12
_PRODUCER_ID_POS = 43  # producerId int64, producerEpoch int16, baseSequence int32
_RECORDS_COUNT_POS = 57

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_PRODUCER = struct.Struct(">qhi")

NO_PARTITION_LEADER_EPOCH = -1
SEQUENCE_MODULUS = 1 << 31  # sequences wrap at Int32.MaxValue like Kafka's
COALESCE_MAX_SOURCE = 16 << 10  # batches at least this big travel unchanged

_scan = native.load("forward_scan")  # the batch walk in C; switched off or not built: _walk below


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
    end_offsets: list[int] = field(default_factory=list)  # source offset after each forwarded batch
    coalesced: list[bool] = field(default_factory=list)  # re-built from several source batches (can be split)
    # audit counts (bucket start -> records) of each forwarded batch when its coalescing walk made them, else
    # None (counted when acknowledged: audit_tally.count_batch)
    counts: list[dict[int, int] | None] = field(default_factory=list)
    next_offset: int = 0  # source offset after everything consumed (forwarded or skipped)
    next_sequence: int = 0  # the mirror's sequence after the forwarded batches
    messages: int = 0  # records forwarded (sum of recordsCount)
    skipped_batches: int = 0  # below the wanted offset, control, or empty
    truncated: bool = False  # the bytes ended inside a batch (a fetch size limit cut it)
    # the embedded mirror: each batch's epoch and sequence spell its live base offset (source_position), so the
    # offline log itself says where the copy of the live partition ends
    source_positions: bool = False

    @property
    def empty(self) -> bool:
        return not self.headers


def source_position(live_offset: int) -> tuple[int, int]:
    """(producer epoch, base sequence) that spell ``live_offset`` on an embedded mirror's batch: the offset's
    high bits in the epoch, its low 31 in the sequence (2^46 offsets: Kafka's epoch is a non-negative int16)."""
    return live_offset // SEQUENCE_MODULUS, live_offset % SEQUENCE_MODULUS


def live_offset_of(producer_epoch: int, base_sequence: int) -> int:
    """The live base offset an embedded mirror's batch was copied from (source_position's inverse)."""
    return producer_epoch * SEQUENCE_MODULUS + base_sequence


def next_sequence(sequence: int, header: RecordBatchHeader) -> int:
    """The sequence after ``header``'s batch: one per offset it spans (compacted batches have gaps)."""
    return (sequence + header.last_offset_delta + 1) % SEQUENCE_MODULUS


def forward_batches(
    data: bytes | bytearray | memoryview,
    fetch_offset: int,
    producer_id: int,
    producer_epoch: int,
    sequence: int,
    coalesce_bytes: int = 0,
    committed: ReadCommitted | None = None,
    source_positions: bool = False,
) -> ForwardedBatches:
    """Rewrite the batches of ``data`` at or after ``fetch_offset`` for the mirror's producer.

    ``sequence`` is the mirror's next sequence for the target partition. A batch that straddles
    ``fetch_offset`` (only possible if someone set the offset inside a batch) is forwarded whole:
    duplicates are acceptable, loss is not. Raises CorruptBatchError on a bad batch; batches before
    it are not returned either, so the caller retries the whole fetch. ``coalesce_bytes`` > 0: small
    consecutive batches become one batch of at most about that many bytes (see the module docstring).
    ``committed``: the read_committed filter of the Fetch answer (aborted transactions' batches are passed
    over like control batches: they carry no units, tail_sync.walk_live applies the same rule).
    ``source_positions``: the embedded mirror's stamping (ForwardedBatches.source_positions; no coalescing).
    """
    mv = data if isinstance(data, memoryview) else memoryview(data)
    out = ForwardedBatches(records=bytearray(), next_offset=fetch_offset, next_sequence=sequence,
                           source_positions=source_positions)
    if source_positions:
        coalesce_bytes = 0  # a re-built batch would have no one live base offset
    pos = 0
    if _scan is not None and (committed is None or not committed.aborts):
        # the uncompressed runs' CRCs are checked as they are concatenated (_emit_run), not in the scan
        items, pos, out.next_offset, out.skipped_batches, out.truncated = _scan.scan(
            mv, 0, fetch_offset, coalesce_bytes, COALESCE_MAX_SOURCE, True)
        for item in items:
            if isinstance(item, list):
                _emit_run(out, [(mv[start:start + size], resume) for resume, start, size in item], producer_id,
                          producer_epoch, deferred=True)
            else:
                resume, start, size = item
                _emit(out, mv[start:start + size], read_header(mv, start), resume, producer_id, producer_epoch)
        if out.truncated or pos >= len(mv):
            return out
    _walk(out, mv, pos, producer_id, producer_epoch, coalesce_bytes, committed)
    return out


def copy_positions(data: bytes | bytearray | memoryview, fetch_offset: int, producer_id: int,
                   committed: ReadCommitted | None = None) -> tuple[memoryview, int, int]:
    """The embedded mirror's walk of one fetched answer: (re-stamped batches, records in them, the live offset
    after everything walked), as forward_batches(..., source_positions=True) gives them.

    One native pass over the answer's own bytes (``_forward_scan.stamp_positions``: check, re-stamp, CRC-32C, in
    place; a read-only ``data`` is copied first) when the answer has no aborted transactions and the module is
    built: the embedded copy keeps the live batches as they are (one per producer batch, often 50 records), so a
    Python step per batch was a third of the copier's time, and a second 8 MiB buffer per answer was another
    copy. Else forward_batches decides; from a batch that is not valid (left as it came) it raises there."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if _scan is not None and (committed is None or not committed.aborts):
        if mv.readonly:
            mv = memoryview(bytearray(mv))
        used, messages, next_offset, pos, truncated = _scan.stamp_positions(mv, fetch_offset, producer_id)
        if truncated or pos >= len(mv):
            return mv[:used], messages, next_offset
        rest = forward_batches(mv[pos:], next_offset, producer_id, 0, 0, committed=committed, source_positions=True)
        return memoryview(bytes(mv[:used]) + bytes(rest.records)), messages + rest.messages, rest.next_offset
    fwd = forward_batches(mv, fetch_offset, producer_id, 0, 0, committed=committed, source_positions=True)
    return memoryview(fwd.records), fwd.messages, fwd.next_offset


def _walk(out: ForwardedBatches, mv: memoryview, pos: int, producer_id: int, producer_epoch: int,
          coalesce_bytes: int, committed: ReadCommitted | None) -> None:
    """forward_batches' walk in Python, from ``pos``: the whole answer when it has aborted transactions or
    the native scan is not built, else from where the scan stopped (a batch that is not valid: raised here)."""
    total = len(mv)
    run: list[tuple[memoryview, int]] = []  # small batches waiting to be coalesced, with their resume offsets
    run_bytes = 0
    while pos < total:
        if total - pos < BATCH_HEADER_SIZE:
            out.truncated = True
            break
        h = read_header(mv, pos)
        if h.magic != 2:
            raise CorruptBatchError(f"batch at offset {h.base_offset} has magic {h.magic}; only v2 is mirrored",
                                    h.base_offset)
        if h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
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
        _check_crc(batch, h)
        resume = out.next_offset
        out.next_offset = h.next_offset
        dropped = committed is not None and committed.drops(h, batch)
        if dropped or h.attributes & CONTROL_MASK or h.records_count == 0:
            out.skipped_batches += 1
            continue
        if coalesce_bytes <= 0:
            _emit(out, batch, h, resume, producer_id, producer_epoch)
            continue
        # dense batches only (no offsets compacted away): a re-built batch spans as many sequence numbers as
        # it has records, which must equal the live offsets its sources span (tail_sync.py maps one to the
        # other)
        eligible = (size < COALESCE_MAX_SOURCE and not h.attributes & TIMESTAMP_TYPE_MASK
                    and h.records_count == h.last_offset_delta + 1)
        if run and (not eligible or run_bytes + size > coalesce_bytes
                    or _codec(run[0][0]) != h.attributes & COMPRESSION_MASK):
            _emit_run(out, run, producer_id, producer_epoch)
            run, run_bytes = [], 0
        if eligible:
            run.append((batch, resume))
            run_bytes += size
        else:
            _emit(out, batch, h, resume, producer_id, producer_epoch)
    if run:
        _emit_run(out, run, producer_id, producer_epoch)


def _check_crc(batch: memoryview, h: RecordBatchHeader) -> None:
    crc = crc32c.crc32c(batch[ATTRIBUTES_POS:], 0, 0)  # GIL kept (_forward_scan.pyx says why)
    if crc != h.crc:
        raise CorruptBatchError(
            f"batch at offset {h.base_offset}: CRC-32C {crc:#010x} != header {h.crc:#010x}", h.base_offset)


def _codec(batch: memoryview) -> int:
    """The compression codec of a whole batch (the low byte of its attributes)."""
    return batch[ATTRIBUTES_POS + 1] & COMPRESSION_MASK


def _emit(out: ForwardedBatches, batch: memoryview, h: RecordBatchHeader, resume: int, producer_id: int,
          producer_epoch: int) -> None:
    """Append one source batch, re-stamped for the mirror's producer."""
    records = out.records
    start, size = len(records), len(batch)
    records += batch
    _I64.pack_into(records, start + _BASE_OFFSET_POS, 0)
    _I32.pack_into(records, start + _LEADER_EPOCH_POS, NO_PARTITION_LEADER_EPOCH)
    _I16.pack_into(records, start + ATTRIBUTES_POS, h.attributes & ~TRANSACTIONAL_MASK)
    if out.source_positions:
        producer_epoch, sequence = source_position(h.base_offset)
    else:
        sequence = out.next_sequence
    _PRODUCER.pack_into(records, start + _PRODUCER_ID_POS, producer_id, producer_epoch, sequence)
    _U32.pack_into(records, start + CRC_POS,
                   crc32c.crc32c(memoryview(records)[start + ATTRIBUTES_POS:start + size], 0, 0))
    out.headers.append(h)
    out.spans.append((start, size))
    out.resume_offsets.append(resume)
    out.end_offsets.append(h.next_offset)
    out.coalesced.append(False)
    out.counts.append(None)
    out.messages += h.records_count
    out.next_sequence = next_sequence(out.next_sequence, h)


def _emit_run(out: ForwardedBatches, run: list[tuple[memoryview, int]], producer_id: int,
              producer_epoch: int, deferred: bool = False) -> None:
    """Append a run of small (batch, resume offset) as one batch (or one by one if it does not re-build).

    ``deferred``: the native scan left the CRC-32C of an uncompressed run to this step (checked as it is
    concatenated, or here before any other path takes the run)."""
    start = len(out.records)
    codec = _codec(run[0][0])
    unchecked = deferred and not codec
    counts = _concat(out, run, codec, producer_id, producer_epoch, unchecked)
    if counts is None:
        if unchecked:
            for batch, _ in run:
                _check_crc(batch, read_header(batch))
        merged = _coalesce(run, codec, producer_id, producer_epoch, out.next_sequence) if len(run) > 1 else None
        if merged is None:
            for batch, resume in run:
                _emit(out, batch, read_header(batch), resume, producer_id, producer_epoch)
            return
        out.records += merged
    h = read_header(out.records, start)._replace(base_offset=_I64.unpack_from(run[0][0])[0])
    out.headers.append(h)
    out.spans.append((start, len(out.records) - start))
    out.counts.append(counts)
    out.resume_offsets.append(run[0][1])
    out.end_offsets.append(read_header(run[-1][0]).next_offset)
    out.coalesced.append(True)
    out.messages += h.records_count
    out.next_sequence = next_sequence(out.next_sequence, h)


def _concat(out: ForwardedBatches, run: list[tuple[memoryview, int]], codec: int, producer_id: int,
            producer_epoch: int, check_crcs: bool) -> dict[int, int] | None:
    """Append an uncompressed run as one natively concatenated batch; its audit counts, or None if the run
    is not for this path (compressed, one batch, no native module) or its records do not walk."""
    if len(run) < 2 or codec or not batch_concat.NATIVE:
        return None
    try:
        _, _, counts = batch_concat.concat_records(out.records, [b for b, _ in run], producer_id,
                                                   producer_epoch, out.next_sequence, BUCKET_MS, check_crcs)
    except batch_concat.RecordWalkError:
        return None  # out.records is as it was: aiokafka's reader decides (re-built, or forwarded as is)
    except CorruptRecordError as e:
        raise CorruptBatchError(str(e), e.offset) from None
    return counts


def _coalesce(run: list[tuple[memoryview, int]], codec: int, producer_id: int, producer_epoch: int,
              sequence: int) -> bytearray | None:
    """The run's records re-built into one batch by aiokafka's C builder, or None (forward them as they are).

    That builder takes a first timestamp of -1 (Kafka's NO_TIMESTAMP) for "none yet": records without a
    timestamp at the head of a run would be written with delta 0 against the next record's timestamp and
    read back with its time (the data changed, the audit books off). Such a run is forwarded unchanged
    unless all its records are -1 (then base = max = -1 and every delta 0, as the source had them).
    """
    total = sum(_I32.unpack_from(batch, _RECORDS_COUNT_POS)[0] for batch, _ in run)
    builder = DefaultRecordBatchBuilder(2, codec, 0, producer_id, producer_epoch, sequence, 1 << 30)
    n, first_ts = 0, None
    try:
        for batch, _ in run:
            for r in DefaultRecordBatch(bytes(batch)):
                ts = r.timestamp
                if first_ts is None:
                    first_ts = ts
                elif first_ts == NO_TIMESTAMP and ts != NO_TIMESTAMP:
                    return None  # the builder would give the leading -1 records this record's time
                if builder.append(n, ts, r.key, r.value, r.headers) is None:
                    return None
                n += 1
            if n > total:
                return None
        if n != total:
            return None
        merged = builder.build()
    except (KafkaError, ValueError, TypeError, IndexError, OverflowError):  # forwarded unchanged instead
        return None
    _I32.pack_into(merged, _LEADER_EPOCH_POS, NO_PARTITION_LEADER_EPOCH)
    return merged


def restamp(records: bytearray, start: int, size: int, producer_id: int, producer_epoch: int,
            sequence: int) -> None:
    """Re-stamp one rewritten batch for another producer id / sequence and fix its CRC-32C."""
    _PRODUCER.pack_into(records, start + _PRODUCER_ID_POS, producer_id, producer_epoch, sequence)
    mv = memoryview(records)
    try:
        _U32.pack_into(records, start + CRC_POS, crc32c.crc32c(mv[start + ATTRIBUTES_POS:start + size]))
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
