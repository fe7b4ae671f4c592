"""Where a partition's copy resumes: the offline log's tail, mapped back to a live offset.

Why this is exact. The mirror's batches in an offline partition all carry the group's producer id P, and
the offline broker appends a batch of P only if its base sequence follows P's last one there (or repeats
one of P's last five batches exactly: then nothing is written and the original offsets are answered). A
batch's sequences span ``lastOffsetDelta + 1`` units; the mirror forwards live data batches whole (one
batch, or a run of consecutive dense batches re-built into one), so every batch of P covers exactly the
live data batches whose units add up to its span, starting where the previous one ended. A checkpoint
(live offset, offline offset, sequence) is one true point of that correspondence, so

* the units of P's batches after the checkpoint's offline offset, U, say how many live units were copied
  after the checkpoint's live offset; walking the live batches from there until U units are passed gives
  the first live offset not in the offline cluster (control and empty batches carry no units, the mirror
  skips them too);
* P's next sequence is the checkpoint's plus U (checked against P's last batch in the tail).

Two mirrors that both believe they own a partition (a zombie after a rebalance or a lost ZooKeeper session,
still with produce requests in flight) are therefore harmless: each derives the same bytes-of-records for
the same sequence numbers, so whichever request lands first is appended and the other is refused as out of
order (its sender then syncs again from the tail) or answered as the duplicate it really is. No time-based
fencing is needed, and nothing has to be waited out before copying.

Costs: a sync reads the offline partition from the checkpoint (or the audit's unpublished start, since
those records are counted again here) to its end and the live partition over as many units: one commit
interval to one audit interval of data, once per partition and ownership change.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from ferry.client.errors import ClientError
from ferry.client.wire_client import LEADERSHIP_ERRORS, WireClient
from ferry.mirror.audit_tally import count_batch
from ferry.mirror.batch_rewrite import SEQUENCE_MODULUS
from ferry.mirror.checkpoint import Checkpoint, Stored, TopicPartition
from ferry.wire.protocol import fetch
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.fetch import FetchPartition
from ferry.wire.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from ferry.wire.protocol.primitives import ProtocolError
from ferry.wire.record.read_committed import ReadCommitted
from ferry.wire.record.record_batch import BATCH_HEADER_SIZE, CONTROL_MASK, RecordBatchHeader, read_header

FETCH_BYTES = 4 << 20
MAX_FETCH_BYTES = 64 << 20


class SyncError(Exception):
    """The tail cannot be mapped now (a broker unreachable, or the logs disagree); retried later."""


class OffsetGone(SyncError):
    """The log does not hold the offset a read starts at (retention deleted it, or the log is shorter)."""


@dataclass
class OfflineTail:
    """The mirror's batches in an offline partition from some point to its end."""

    after: int  # where the units are counted from (a checkpoint's offline offset)
    log_end: int = -1  # the partition's high watermark when read
    units: int = 0  # sequence units of P's batches at or after ``after``
    end: int = -1  # offline offset after P's last batch (``after`` if there is none)
    next_seq: int | None = None  # the sequence after P's last batch
    epoch: int | None = None  # P's epoch in its last batch
    before: Counter = field(default_factory=Counter)  # record counts of P's batches in [count_from, split)
    counts: Counter = field(default_factory=Counter)  # ... in [split, end)


@dataclass
class SyncResult:
    resume: int  # the live offset to copy from
    seq: int  # the next sequence
    epoch: int
    offline: int  # offline offset after the mirror's last batch
    anchor: Checkpoint  # the checkpoint this copy continues from
    write: bool  # the anchor is new: store it before copying
    frozen_counts: Counter | None = None  # counts of anchor.publishing, recounted
    open_counts: Counter = field(default_factory=Counter)  # counts of [publishing end or audit, offline)
    note: str = ""  # what the sync found, for the log


def fetch_batches(client: WireClient, tp: TopicPartition, start: int, what: str,
                  committed: bool = False) -> Iterator[tuple[RecordBatchHeader, memoryview, bool]]:
    """Whole batches of ``tp`` (header, bytes, dropped) from ``start`` to the end the first answer gives: the
    high watermark, or with ``committed`` (read_committed, as the mirror copies live) the last stable offset;
    ``dropped``: an aborted transaction's batch or a marker (wire/record/read_committed.py), never set
    without ``committed``. Raises SyncError (OffsetGone for an offset outside the log)."""
    offset, size, stop = start, FETCH_BYTES, None
    while stop is None or offset < stop:
        res = _fetch(client, tp, offset, size, what, committed)
        end = res.last_stable_offset if committed and res.last_stable_offset >= 0 else res.high_watermark
        if stop is None:
            stop = end
        data = res.records
        mv = memoryview(data) if data is not None else memoryview(b"")
        rule = ReadCommitted(res.aborted_transactions) if committed else None
        pos, moved = 0, False
        while len(mv) - pos >= BATCH_HEADER_SIZE:
            h = read_header(mv, pos)
            if pos + h.size > len(mv):
                break
            batch = mv[pos:pos + h.size]
            yield h, batch, rule is not None and rule.drops(h, batch)
            pos += h.size
            offset, moved = max(offset, h.next_offset), True
        if not moved:
            if offset >= end:
                return
            if size >= MAX_FETCH_BYTES:
                raise SyncError(f"{what} {tp[0]}-{tp[1]}: a batch at {offset} exceeds {MAX_FETCH_BYTES} bytes")
            size *= 2


def _fetch(client: WireClient, tp: TopicPartition, offset: int, size: int, what: str, committed: bool = False):
    try:
        node = client.leader(*tp)
        if node is None:
            raise SyncError(f"{what} {tp[0]}-{tp[1]} has no leader")
        try:
            body = client.connection(node).request(
                *fetch.encode_request([(tp[0], [FetchPartition(tp[1], offset, size)])], 0, 1, size,
                                      isolation_level=fetch.READ_COMMITTED if committed else fetch.READ_UNCOMMITTED))
            resp = fetch.parse_response(body)
        except (ClientError, ProtocolError):
            client.close_connection(node)
            raise
    except (ClientError, ProtocolError) as e:
        raise SyncError(f"reading {what} {tp[0]}-{tp[1]} at {offset}: {e}") from e
    res = next((r for r in resp.topics.get(tp[0], []) if r.partition == tp[1]), None)
    if res is None:
        raise SyncError(f"{what} {tp[0]}-{tp[1]}: no answer for the partition")
    if res.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
        raise OffsetGone(f"{what} {tp[0]}-{tp[1]}: offset {offset} is outside the log")
    if res.error_code != ErrorCode.NONE:
        if res.error_code in LEADERSHIP_ERRORS:
            client.leaders.pop(tp, None)
        raise SyncError(f"reading {what} {tp[0]}-{tp[1]} at {offset}: error {res.error_code}")
    return res


def scan_offline(client: WireClient, tp: TopicPartition, pid: int, after: int, count_from: int, split: int,
                 count: bool) -> OfflineTail:
    """P's batches from min(after, count_from) to the end: units after ``after``, record counts of those at
    or after ``count_from`` (split at ``split``) when ``count``."""
    tail = OfflineTail(after, end=after)
    start = min(after, count_from)
    try:
        _scan(client, tp, pid, start, after, count_from, split, count, tail)
    except OffsetGone:
        earliest = _offset(client, tp, EARLIEST_TIMESTAMP, "offline")
        latest = _offset(client, tp, LATEST_TIMESTAMP, "offline")
        if start < latest:  # retention deleted the start: what is left is all there is to read
            tail = OfflineTail(after, end=after)
            _scan(client, tp, pid, max(start, earliest), after, count_from, split, count, tail)
        tail.log_end = max(tail.log_end, latest) if start < latest else latest
        return tail
    if tail.log_end < 0:  # nothing read: the end is what ListOffsets says
        tail.log_end = _offset(client, tp, LATEST_TIMESTAMP, "offline")
    return tail


def _scan(client: WireClient, tp: TopicPartition, pid: int, start: int, after: int, count_from: int, split: int,
          count: bool, tail: OfflineTail) -> None:
    for h, batch, _dropped in fetch_batches(client, tp, start, "offline"):
        tail.log_end = max(tail.log_end, h.next_offset)
        if h.producer_id != pid or h.attributes & CONTROL_MASK:
            continue
        if count and h.base_offset >= count_from:
            count_batch(tail.before if h.base_offset < split else tail.counts, batch, h)
        if h.base_offset >= after:
            tail.units += h.last_offset_delta + 1
            tail.end = h.next_offset
            tail.next_seq = (h.base_sequence + h.last_offset_delta + 1) % SEQUENCE_MODULUS
            tail.epoch = h.producer_epoch


def walk_live(client: WireClient, tp: TopicPartition, start: int, units: int) -> int:
    """The live offset after ``units`` sequence units of data batches from ``start`` (the rule of
    batch_rewrite.forward_batches: batches ending at or before ``start`` are not counted, control and empty
    batches carry none, nor do aborted transactions' batches: the live log is read read_committed, as the
    mirror copies it)."""
    if units == 0:
        return start
    pos = start
    for h, _batch, dropped in fetch_batches(client, tp, start, "live", committed=True):
        if h.next_offset <= pos:
            continue
        pos = h.next_offset
        if dropped or h.attributes & CONTROL_MASK or h.records_count == 0:
            continue
        units -= h.last_offset_delta + 1
        if units == 0:
            return pos
        if units < 0:
            raise SyncError(f"live {tp[0]}-{tp[1]}: the offline copy ends inside the live batch ending at {pos} "
                            f"(the logs disagree; not copying until they are understood)")
    raise SyncError(f"live {tp[0]}-{tp[1]} ends at {pos}, {units} units before the offline copy does")


def _offset(client: WireClient, tp: TopicPartition, ts: int, what: str) -> int:
    try:
        return client.offsets({tp: ts})[tp]
    except ClientError as e:
        raise SyncError(f"ListOffsets on {what} {tp[0]}-{tp[1]}: {e}") from e


def sync_partition(source: WireClient, target: WireClient, tp: TopicPartition, pid: int, pid_epoch: int,
                   stored: Stored, assigned: int | None, count: bool) -> SyncResult:
    """Where to copy ``tp`` from, given what the store holds (``assigned``: the offset the partition was
    handed over with, used only when there is no checkpoint and no committed offset)."""
    ck = stored.checkpoint
    if ck is None:
        start = stored.committed if stored.committed is not None else assigned
        if start is None:
            start = _offset(source, tp, EARLIEST_TIMESTAMP, "live")
        end = _offset(target, tp, LATEST_TIMESTAMP, "offline")
        anchor = Checkpoint(start, end, 0, pid_epoch, end)
        return SyncResult(start, 0, pid_epoch, end, anchor, True,
                          note=f"no checkpoint: copying from live offset {start} (offline end {end})")
    split = ck.publishing[1] if ck.publishing else ck.audit
    tail = scan_offline(target, tp, pid, ck.offline, ck.audit if count else ck.offline, split, count)
    if tail.log_end < ck.offline:
        anchor = Checkpoint(ck.live, tail.log_end, 0, ck.epoch + 1, tail.log_end)
        return SyncResult(ck.live, 0, anchor.epoch, tail.log_end, anchor, True,
                          note=f"OFFLINE DATA LOST: the offline partition ends at {tail.log_end}, below the "
                               f"checkpoint's {ck.offline} (unclean election? topic re-created?); copying on "
                               f"from live offset {ck.live} under producer epoch {anchor.epoch}")
    seq = _checked_seq(tp, ck, tail)
    frozen = tail.before if ck.publishing else None
    if stored.committed is not None and stored.committed != ck.live:
        anchor = ck.moved(stored.committed, tail.end, seq)
        return SyncResult(stored.committed, seq, ck.epoch, tail.end, anchor, True, frozen, tail.counts,
                          note=f"the group's offset was moved to {stored.committed} (the checkpoint says "
                               f"{ck.live}): copying from there, as asked")
    try:
        resume = walk_live(source, tp, ck.live, tail.units)
    except OffsetGone:
        start = _offset(source, tp, EARLIEST_TIMESTAMP, "live")
        anchor = ck.moved(start, tail.end, seq)
        return SyncResult(start, seq, ck.epoch, tail.end, anchor, True, frozen, tail.counts,
                          note=f"live offsets from the checkpoint's {ck.live} were deleted by retention: copying "
                               f"from the live log start {start} (records before it may be copied twice)")
    return SyncResult(resume, seq, ck.epoch, tail.end, ck, False, frozen, tail.counts,
                      note=f"resuming at live offset {resume}: {tail.units} offsets copied after the checkpoint "
                           f"({ck.live} / offline {ck.offline})")


def resync_local(source: WireClient, target: WireClient, tp: TopicPartition, pid: int, anchor: Checkpoint,
                 count: bool) -> tuple[int, int, int, Counter]:
    """After a refused sequence: from this process's own last acknowledged point (``anchor``), what else
    reached the offline partition. Returns (resume, next sequence, offline end, counts of those records)."""
    tail = scan_offline(target, tp, pid, anchor.offline, anchor.offline, anchor.offline, count)
    if tail.log_end < anchor.offline:
        raise SyncError(f"offline {tp[0]}-{tp[1]} ends at {tail.log_end}, below acknowledged {anchor.offline}")
    seq = _checked_seq(tp, anchor, tail)
    return walk_live(source, tp, anchor.live, tail.units), seq, tail.end, tail.counts


def _checked_seq(tp: TopicPartition, ck: Checkpoint, tail: OfflineTail) -> int:
    seq = (ck.seq + tail.units) % SEQUENCE_MODULUS
    if tail.next_seq is not None and (tail.next_seq != seq or tail.epoch != ck.epoch):
        raise SyncError(f"offline {tp[0]}-{tp[1]}: the mirror's last batch ends at sequence {tail.next_seq} epoch "
                        f"{tail.epoch}, the checkpoint + {tail.units} units says {seq} epoch {ck.epoch} (a "
                        f"checkpoint written by something else?)")
    return seq
