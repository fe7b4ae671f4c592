"""Appending to a partition's log: a produce payload validated, its producers' sequences and the leader epoch
checked, offsets assigned and the batches written (one core, ``_append``, for a whole payload and for the one
batch a producer's request usually carries); a pipelining producer's burst written with one write; a follower's
copy of its leader's batches, byte for byte.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ferry.broker.log.append_info import AppendInfo
from ferry.broker.log.leader_epoch_cache import LeaderEpochFileCache
from ferry.broker.log.local_log import LocalLog
from ferry.broker.log.log_flush import LogDurability
from ferry.broker.log.log_offline import LogStatus
from ferry.broker.log.log_offsets import LogOffsets
from ferry.broker.log.log_segment import LogSegment
from ferry.broker.log.producer_state import ProducerStateManager
from ferry.wire.log_config import LogConfig
from ferry.wire.record.compression import PRODUCER
from ferry.wire.record.control_batch import control_type
from ferry.wire.record.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRecordError,
    OffsetMismatchError,
    RecordTooLargeError,
)
from ferry.wire.record.recompress import recompress_batches
from ferry.wire.record.record_batch import (
    CONTROL_MASK,
    LOG_OVERHEAD,
    TRANSACTIONAL_MASK,
    RecordBatchHeader,
    validate_batches,
)
from ferry.wire.record.record_filter import first_keyless_record

Buffer = bytes | bytearray | memoryview
_new = tuple.__new__
# how _append writes: one batch in place in a request's buffer (write_batches, native when built); a payload
# (pwritev of the pieces); a payload whose headers get LogAppendTime
IN_PLACE, PAYLOAD, STAMPED = 0, 1, 2


class LogAppender:
    """Every way batches enter a log. Holds no state of its own: it changes the offsets, the producer state,
    the epochs and the segments it is given, under the log's lock."""

    def __init__(self, local: LocalLog, offsets: LogOffsets, producers: ProducerStateManager,
                 epochs: LeaderEpochFileCache, status: LogStatus, durability: LogDurability, lock: threading.RLock,
                 clock: Callable[[], int], after_append: Callable[[bool], None]) -> None:
        self._local = local
        self._offsets = offsets
        self._producers = producers
        self._epochs = epochs
        self._status = status
        self._durability = durability
        self._count_appended = durability.count_appended  # bound once: the append path calls it every time
        self._lock = lock
        self._clock = clock
        self._after_append = after_append  # outside the lock: wake readers, ask for a flush

    # -- a leader's append -----------------------------------------------------------------------------

    def append(self, records: Buffer, leader_epoch: int = -1, allow: int = 0, check_sequences: bool = True,
               crcs_fresh: bool = False) -> AppendInfo:
        """Validate, sequence-check, assign offsets and write one produce payload.

        ``leader_epoch`` >= 0 (a replicated partition's leader): every batch is written with it as
        partitionLeaderEpoch and the epoch cache learns where the epoch starts. Raises
        CorruptRecordError, InvalidRecordError, RecordTooLargeError, OutOfOrderSequenceError,
        InvalidProducerEpochError or FencedLeaderEpochError (an epoch older than the log's latest);
        nothing is written then. KafkaStorageError when the directory fails (or failed before): the
        bytes of a failed write are cut off and the log is offline (log_offline.py). ``allow``: the
        transactional/control attribute bits accepted (a transactional produce, a marker).
        ``check_sequences`` False: the embedded mirror's batches, whose epoch and sequence spell the live offset
        they were copied from (gaps where the live log has markers or aborted data); a repeat of one of the
        producer's last batches is still answered as a duplicate, nothing is refused for a gap. ``crcs_fresh``:
        the caller gave every batch its CRC-32C in this process (the embedded mirror's walk, after checking the
        live batch's own): not computed a third time; every other check stays.
        """
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        config = self._local.config
        try:
            mv, headers = self._validated(mv, config, allow, not crcs_fresh)
        except RecordTooLargeError:
            written = self._written_before(mv)
            if written is None:
                raise
            return written
        if len(headers) == 1:  # a producer's usual request: one batch
            h = headers[0]
            count = h.records_count
            span = h.last_offset_delta + 1
            idempotent = h.producer_id >= 0
        else:
            count = span = 0
            idempotent = False
            for h in headers:
                count += h.records_count
                span += h.last_offset_delta + 1
                if h.producer_id >= 0:
                    idempotent = True
        return self._append(mv, 0, headers, len(mv), span, count, idempotent, leader_epoch,
                            STAMPED if config.log_append_time else PAYLOAD, check_sequences)

    def append_batch(self, buf: Buffer, pos: int, h: RecordBatchHeader, leader_epoch: int = -1) -> AppendInfo:
        """append() of the one batch at ``pos`` in ``buf`` whose header ``h`` produce_parse read and checked
        (framing, magic, counts, attributes, CRC-32C): the same checks in the same order, the same bytes
        written and the same accounting, without the copies and loops. A batch that needs more than that (over
        a size limit, a topic codec to convert to, LogAppendTime) goes to append(), which decides."""
        config = self._local.config
        size = h.batch_length + LOG_OVERHEAD
        if (size > config.max_message_bytes or size > config.segment_bytes or config.compression != PRODUCER
                or config.log_append_time or config.compact):
            return self.append(memoryview(buf)[pos:pos + size], leader_epoch)
        return self._append(buf, pos, [h], size, h.last_offset_delta + 1, h.records_count, h.producer_id >= 0,
                            leader_epoch, IN_PLACE)

    def _append(self, buf: Buffer, pos: int, headers: list[RecordBatchHeader], size: int, span: int, count: int,
                idempotent: bool, leader_epoch: int, mode: int, check_sequences: bool = True) -> AppendInfo:
        """The append core: ``headers`` (validated) of the batches from ``pos`` in ``buf`` (``size`` bytes,
        ``span`` offsets, ``count`` records) written at the log end as ``mode`` says, unless they repeat an append
        already made."""
        with self._lock:
            status = self._status
            if status.closed or status.offline:
                status.check_open()
            epochs = self._epochs
            latest = epochs.latest_epoch
            new_epoch = leader_epoch != latest and leader_epoch >= 0
            if new_epoch and leader_epoch < latest:
                raise FencedLeaderEpochError(f"leader epoch {leader_epoch} is older than {latest} in {status.name}")
            state = self._producers
            if idempotent:
                dup = state.find_duplicate(headers)
                if dup is not None:
                    return AppendInfo(dup.first_offset, dup.last_offset, duplicate=True)
                if check_sequences:
                    state.check(headers)
            local = self._local
            config = local.config
            first = self._offsets.end
            try:
                if new_epoch:
                    epochs.assign(leader_epoch, first)  # durable no later than the epoch's data (flush)
                seg = local.segments[-1]
                now = self._clock()
                if seg.should_roll(size, first + span - 1, now, config):
                    seg = local.roll(first, now)
                if mode == IN_PLACE:
                    append_time = -1
                    next_offset = seg.append_batches([(buf, pos, headers[0])], first, leader_epoch)
                elif mode == PAYLOAD:
                    append_time = -1
                    next_offset = seg.append(buf, headers, first, None, leader_epoch)
                else:
                    append_time = now
                    next_offset = seg.append(buf, headers, first, now, leader_epoch)
            except OSError as e:  # nothing counted; a partial write was cut off (LogSegment)
                raise status.storage_failure("append", e) from e
            if idempotent and (len(headers) == 1 or not state.update_run(headers, first, now)):
                offset = first
                for h in headers:
                    if h.producer_id >= 0:
                        state.update(h, offset, now, control_type(buf, pos) if h.is_control else -1)
                    offset += h.last_offset_delta + 1
                    pos += h.size
            self._offsets.end = next_offset
            want_flush = self._count_appended(count, now)
        self._after_append(want_flush)
        return _new(AppendInfo, (first, next_offset - 1, False, append_time))  # a NamedTuple's own __new__ costs more

    @staticmethod
    def _validated(mv: memoryview, config: LogConfig, allow: int = 0, check_crcs: bool = True
                   ) -> tuple[memoryview, list[RecordBatchHeader]]:
        """The payload as it will be written (converted to the topic's codec if it has one; never a marker)
        and its headers. A compacted topic refuses records without a key (InvalidRecordError)."""
        if len(mv) > config.segment_bytes:
            raise RecordTooLargeError(f"record set of {len(mv)} bytes exceeds segment.bytes {config.segment_bytes}")
        headers = validate_batches(mv, config.max_message_bytes, allow, check_crcs)
        if config.compact and not allow & CONTROL_MASK and first_keyless_record(mv, headers) is not None:
            # Kafka's rule (and message): the cleaner keeps records by key, one without a key has no place
            raise InvalidRecordError("Compacted topic cannot accept message without key")
        if config.compression != PRODUCER and not allow & CONTROL_MASK:
            converted = recompress_batches(mv, headers, config.compression, config.compression_level,
                                           config.max_message_bytes)
            if converted is not None:
                mv = memoryview(converted[0])
                headers = converted[1]
                if len(mv) > config.segment_bytes:
                    raise RecordTooLargeError(
                        f"record set of {len(mv)} bytes as {config.compression_type} exceeds segment.bytes "
                        f"{config.segment_bytes}")
        return mv, headers

    def _written_before(self, mv: memoryview) -> AppendInfo | None:
        """A too-large idempotent payload that repeats an append already made (the size limit was lowered
        since, or conversion grew it) is answered as the duplicate it is, not refused: a producer whose
        first attempt had an unknown outcome then learns the truth, and a refusal always means "not
        written" (the mirror relies on it to split batches safely)."""
        try:
            headers = validate_batches(mv)
        except (CorruptRecordError, InvalidRecordError, RecordTooLargeError):
            return None
        if not any(h.producer_id >= 0 for h in headers):
            return None
        with self._lock:
            dup = self._producers.find_duplicate(headers)
        return None if dup is None else AppendInfo(dup.first_offset, dup.last_offset, duplicate=True)

    def append_batches(self, items: list, leader_epoch: int = -1) -> list[AppendInfo] | None:
        """append_batch of several batches of producers without a producer id (no sequence to check), each
        (buffer, position, header) as produce_parse gave it, in order, written with one write: a pipelining
        producer's burst of one-message requests costs one pwritev, not one each. None (nothing done) when
        any of them needs more than append_batch does or the group would not fit the active segment: the
        caller appends them one by one then, which decides exactly as before."""
        local = self._local
        config = local.config
        limit = min(config.max_message_bytes, config.segment_bytes)
        if config.compression != PRODUCER or config.log_append_time or config.compact:
            return None
        total = span = count = 0
        for _, _, h in items:
            size = h.batch_length + LOG_OVERHEAD
            if size > limit or h.producer_id >= 0:
                return None
            total += size
            span += h.last_offset_delta + 1
            count += h.records_count
        with self._lock:
            status = self._status
            if status.closed or status.offline:
                return None
            if leader_epoch != self._epochs.latest_epoch and leader_epoch >= 0:
                return None  # a new (or fenced) epoch: append_batch records or refuses it
            first = self._offsets.end
            seg = local.segments[-1]
            now = self._clock()
            n = len(items)  # at most one index entry each: an index that could fill up mid-group rolls one by one
            oi, ti = seg.indexes.offset_index, seg.indexes.time_index
            if (seg.size + total > config.segment_bytes or oi.entries + n >= oi.max_entries
                    or ti.entries + n >= ti.max_entries or seg.should_roll(total, first + span - 1, now, config)):
                return None
            try:
                next_offset = seg.append_batches(items, first, leader_epoch)
            except OSError as e:  # nothing counted; a partial write was cut off (LogSegment.append_batches)
                raise status.storage_failure("append", e) from e
            self._offsets.end = next_offset
            want_flush = self._count_appended(count, now)
        self._after_append(want_flush)
        infos = []
        for _, _, h in items:
            last = first + h.last_offset_delta
            infos.append(_new(AppendInfo, (first, last, False, -1)))
            first = last + 1
        return infos

    # -- a follower's append ---------------------------------------------------------------------------

    def append_as_follower(self, records: Buffer) -> AppendInfo:
        """Append batches exactly as the leader wrote them (what its read() returned).

        A follower's log must be its leader's byte for byte, batch for batch: the same offsets, the same
        partitionLeaderEpoch in every header, no conversion. Checked like a produce (CRC-32C, magic 2,
        framing; transactional batches and markers accepted) but not against max.message.bytes (the leader
        accepted them) nor the producers' sequences (the leader checked them; the state is still kept, so that
        as leader this replica recognises retries). The first batch must start at log_end_offset and each next
        batch where the previous one ended (at or after, on a compacted topic: the leader's cleaner leaves
        holes): OffsetMismatchError otherwise, with nothing written. A batch whose
        partitionLeaderEpoch is newer than the epoch cache's latest starts that epoch in the cache. Flushed as
        produced data is.
        """
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        headers = validate_batches(mv, allow=CONTROL_MASK | TRANSACTIONAL_MASK)
        status = self._status
        with self._lock:
            status.check_open()
            end = self._offsets.end
            first = headers[0].base_offset
            if first < end or (first > end and not self._local.config.compact):
                raise OffsetMismatchError(
                    f"{status.name}: a replica append starts at offset {first}, the log ends at {end}")
            expected = first
            for h in headers:
                # a compacted leader's log has holes where the cleaner removed records: offsets only grow
                if h.base_offset < expected or (h.base_offset > expected and not self._local.config.compact):
                    raise OffsetMismatchError(
                        f"{status.name}: batch at offset {h.base_offset} does not follow the one ending at {expected}")
                expected = h.next_offset
            try:
                self._follower_write(mv, headers)
            except OSError as e:  # runs written before the failure stay counted: they are whole batches
                raise status.storage_failure("replica append", e) from e
            want_flush = self._durability.unflushed_messages >= self._local.config.flush_interval_messages
        self._after_append(want_flush)
        return AppendInfo(first, expected - 1)

    def _follower_write(self, mv: memoryview, headers: list[RecordBatchHeader]) -> None:
        """Learn the batches' epochs and write them, rolling where the leader did (caller holds the lock)."""
        local = self._local
        config = local.config
        epochs = self._epochs
        for h in headers:
            if h.partition_leader_epoch > epochs.latest_epoch:
                epochs.assign(h.partition_leader_epoch, h.base_offset)
        now = self._clock()
        seg = local.segments[-1]
        try:
            start = pos = group = 0
            for i, h in enumerate(headers):
                # Roll where the leader did (before a batch that does not fit): a fetched set may hold
                # more than one segment's worth. Runs of batches that fit go in one write.
                if pos > start and seg.size + (pos - start) + h.size > config.segment_bytes:
                    self._append_raw(seg, mv[start:pos], headers[group:i], now)
                    start, group = pos, i
                if pos == start and seg.should_roll(h.size, h.last_offset, now, config):
                    seg = local.roll(self._offsets.end, now)
                pos += h.size
            self._append_raw(seg, mv[start:pos], headers[group:], now)
        except BaseException:
            epochs.truncate_from_end(self._offsets.end)  # epochs of batches that were not written
            raise

    def _append_raw(self, seg: LogSegment, view: memoryview, headers: list[RecordBatchHeader], now: int) -> None:
        """Write one run of batches into ``seg`` and account for it (the log end moves per run, so a later
        failure leaves a consistent log)."""
        offsets = self._offsets
        offsets.end = seg.append_raw(view, headers)
        state = self._producers
        pos = count = 0
        for h in headers:
            if h.producer_id >= 0:
                state.update(h, h.base_offset, now, control_type(view, pos) if h.is_control else -1)
            count += h.records_count
            pos += h.size
        self._count_appended(count, now)
        if state.unreplicated:
            state.first_unstable_offset(offsets.high_watermark)  # forget transactions decided and replicated
