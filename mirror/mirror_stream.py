"""MirrorStream: one worker thread moving its share of the owned partitions from live to offline.

Each round it
1. sends one Fetch per live leader (all its partitions whose pipeline has room),
2. sends Produce requests per offline leader: request j carries the j-th unacknowledged batch of each
   partition (one batch per partition per request, at most MAX_IN_FLIGHT per partition, answered in
   order), so the offline broker's idempotence check sees exactly one batch and dedupes a retry exactly,
3. reads the produce answers (acknowledged batches are counted for audit and become committable; a
   coalesced batch refused as too large is dropped with everything after it and re-fetched, coalesced
   smaller: see `_split_refused`),
4. reads the fetch answers and rewrites their batches into the pipeline (`batch_rewrite`; runs of small
   batches are coalesced, since only MAX_IN_FLIGHT batches per partition can be in flight).

Fetching overlaps producing; a partition without work long-polls the live broker. Every failure
(connection refused or cut, leader moved, unknown partition, refused sequence) puts the partition in
exponential back-off and leaves its unacknowledged batches in place, byte-identical, for the next try:
nothing is ever skipped. Ownership changes arrive as commands between rounds.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from ferry.client.errors import ClientError
from ferry.client.raw_requests import fetch_request, produce_request
from ferry.client.raw_responses import parse_fetch, parse_produce
from ferry.client.wire_client import LEADERSHIP_ERRORS, WireClient
from ferry.mirror.audit_tally import BatchWalkError, CountFn, tally_batches
from ferry.mirror.batch_rewrite import CorruptBatchError, forward_batches, next_sequence, restamp
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.partition_mirror import (
    MAX_FETCH_BYTES,
    PartitionMirror,
    PendingBatch,
    TopicPartition,
    backoff,
)
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.fetch import FetchPartition
from ferry.wire.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from ferry.wire.protocol.primitives import ProtocolError

log = logging.getLogger("ferry.mirror")

Slot = tuple[PartitionMirror, list[PendingBatch]]  # consecutive batches of one partition in one request

MAX_IN_FLIGHT = 5  # per partition: the offline broker remembers the last 5 batches of a producer
MAX_PENDING_BYTES = 8 << 20  # per partition: stop fetching ahead beyond this
MAX_STREAM_PENDING_BYTES = 64 << 20  # per stream: bounds memory however many partitions it owns
MAX_PRODUCE_REQUEST_BYTES = 16 << 20
MAX_PARTITION_PRODUCE_BYTES = 4 << 20  # batches of one partition travelling in one request
FETCH_RESPONSE_MAX_BYTES = 32 << 20
FETCH_WAIT_MS = 500  # long poll when idle: also bounds how long an ownership change waits
METADATA_MIN_INTERVAL_S = 0.2
COALESCE_BYTES = 256 << 10  # small fetched batches are re-built into batches of about this size
MIN_COALESCE_BYTES = 1 << 10  # a partition whose coalesce limit would fall below this stops coalescing
TOO_LARGE_ERRORS = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE})

PRODUCER_STATE_ERRORS = frozenset({
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.UNKNOWN_PRODUCER_ID,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
})
# Answers after which the batches may or may not have been written.
UNKNOWN_OUTCOME_ERRORS = frozenset({
    ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
})
# Errors that retrying alone will not cure: logged at ERROR level (still retried, never skipped).
FATAL_LOOKING = frozenset({
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.INVALID_RECORD, ErrorCode.INVALID_REQUIRED_ACKS, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.INVALID_TIMESTAMP,
})


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class MirrorStream(threading.Thread):
    """A worker thread; partitions are handed to it with `assign` and taken back with `revoke`."""

    def __init__(self, index: int, source: WireClient, target: WireClient, count: CountFn,
                 metrics: MirrorMetrics, fetch_wait_ms: int = FETCH_WAIT_MS,
                 coalesce_bytes: int = COALESCE_BYTES) -> None:
        super().__init__(name=f"ferry-mirror-stream-{index}", daemon=True)
        self.index = index
        self.source = source
        self.target = target
        self.count = count
        self.metrics = metrics
        self.fetch_wait_ms = fetch_wait_ms
        self.coalesce_bytes = coalesce_bytes
        # partition -> a lower coalesce limit, learnt from the offline broker refusing a coalesced batch
        self.coalesce_limits: dict[TopicPartition, int] = {}
        self.partitions: dict[TopicPartition, PartitionMirror] = {}
        self.sequences: dict[TopicPartition, int] = {}  # next sequence per partition for our producer id
        # partition -> the batches that were unacknowledged (possibly sent) when it was revoked, kept as
        # bytes so that a partition coming back at their offset resends exactly them
        self._rewind: dict[TopicPartition, list[PendingBatch]] = {}
        self.producer_id: int | None = None
        self.producer_epoch = 0
        self._pid_retry_at = 0.0
        self._pid_failures = 0
        self._needs_new_pid = False
        self._source_stale = True
        self._target_stale = True
        self._source_refreshed = self._target_refreshed = 0.0  # earliest next refresh (monotonic)
        self._source_md_failures = self._target_md_failures = 0
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._committable: dict[TopicPartition, int] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}
        self.rounds = 0

    # ------------------------------------------------------------------ control (other threads)
    def assign(self, offsets: dict[TopicPartition, int | None]) -> None:
        """Start mirroring these partitions from these offsets (None = the live log start)."""
        if offsets:
            self._commands.put(("assign", dict(offsets), None))

    def revoke(self, partitions: set[TopicPartition], timeout: float = 120.0) -> dict[TopicPartition, int]:
        """Stop mirroring ``partitions`` and return their committable offsets (acknowledged prefix).

        Blocks until the worker finished its current round, so nothing for them is in flight when the
        caller commits and releases ownership.
        """
        if not partitions:
            return {}
        if not self.is_alive():
            return self._take(partitions)
        fut: Future = Future()
        self._commands.put(("revoke", set(partitions), fut))
        return fut.result(timeout)

    def committable(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._committable)

    def high_watermarks(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._high_watermarks)

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    # ------------------------------------------------------------------ thread
    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._apply_commands()
                if not self.partitions:
                    self._wait_for_command(0.5)
                    continue
                try:
                    did_work = self._round()
                except Exception:  # a bug must not silently end the stream: log, back off, go on
                    log.exception("mirror stream %d: unexpected error in a round", self.index)
                    self.metrics.error("internal")
                    did_work = False
                self.rounds += 1
                if not did_work:
                    self._wait_for_command(self._idle_wait())
        finally:
            self._apply_commands()
            self.source.close()
            self.target.close()

    def _wait_for_command(self, seconds: float) -> None:
        try:
            cmd = self._commands.get(timeout=max(seconds, 0.001))
        except queue.Empty:
            return
        self._commands.put(cmd)  # handled in order at the top of the loop

    def _idle_wait(self) -> float:
        now = time.monotonic()
        times = [min(p.fetch_retry_at, p.produce_retry_at) for p in self.partitions.values()]
        times.append(self._pid_retry_at)
        nxt = min((t for t in times if t > now), default=now + 0.05)
        return min(max(nxt - now, 0.005), 0.5)

    def _apply_commands(self) -> None:
        while True:
            try:
                kind, arg, fut = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "assign":
                for tp, offset in arg.items():
                    if tp not in self.partitions:
                        self.partitions[tp] = PartitionMirror(tp[0], tp[1], offset)
                        self._maybe_rewind(self.partitions[tp])
                self._source_stale = self._target_stale = True
                self._publish_offsets()
            elif kind == "revoke":
                try:
                    fut.set_result(self._take(arg))
                except Exception as e:  # pragma: no cover - _take does not raise
                    fut.set_exception(e)

    def _take(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        out = {}
        for tp in partitions:
            pm = self.partitions.pop(tp, None)
            if pm is None:
                continue
            off = pm.commit_offset()
            if off is not None:
                out[tp] = off
            unacked = pm.unacked(MAX_IN_FLIGHT)  # only these can have been sent
            if unacked:
                self._rewind[tp] = [PendingBatch(bytearray(b.view()), 0, b.size, b.header, b.resume_offset,
                                                 b.sequence, uncertain=True, end_offset=b.end_offset,
                                                 coalesced=b.coalesced)
                                    for b in unacked]
                self._trim_rewind()
        with self._lock:
            for tp in partitions:
                self._committable.pop(tp, None)
                self._high_watermarks.pop(tp, None)
        return out

    def _maybe_rewind(self, pm: PartitionMirror) -> None:
        """Sequences are never reused for other bytes under one producer id (the broker would take a
        different batch with a cached sequence range for a retry and drop it). The one exception: a
        partition that comes back at exactly the offset of its first unacknowledged batch resends the
        very batches it held (kept as bytes: a fresh fetch could coalesce differently) under their
        sequences, one per request, and the broker dedupes them exactly; fetching goes on after them.
        Otherwise the sequence moves on; the gap makes the broker refuse it and we take a new producer id.
        """
        kept = self._rewind.pop(pm.tp, None)
        if not kept or pm.fetch_offset != kept[0].resume_offset:
            return
        for b in kept:
            pm.add_pending(b)
        last = kept[-1]
        pm.fetch_offset = last.end_offset
        self.sequences[pm.tp] = next_sequence(last.sequence, last.header)

    def _trim_rewind(self) -> None:
        """Bound the bytes kept for revoked partitions (dropping one only costs a new producer id later)."""
        total = sum(b.size for kept in self._rewind.values() for b in kept)
        for tp in list(self._rewind):
            if total <= MAX_STREAM_PENDING_BYTES:
                break
            total -= sum(b.size for b in self._rewind.pop(tp))

    def _publish_offsets(self) -> None:
        with self._lock:
            for tp, pm in self.partitions.items():
                off = pm.commit_offset()
                if off is not None:
                    self._committable[tp] = off
                if pm.high_watermark >= 0:
                    self._high_watermarks[tp] = pm.high_watermark

    # ------------------------------------------------------------------ one round
    def _round(self) -> bool:
        now = time.monotonic()
        if not self._ensure_producer_id(now):
            return False
        if self._needs_new_pid and now >= self._pid_retry_at:
            self._reset_producer_id()
        self._refresh_metadata(now)
        fetch_plan = self._plan_fetches(now)
        produce_plan = self._plan_produces(now)
        if not fetch_plan and not produce_plan:
            return False
        wait_ms = 0 if produce_plan else self._fetch_wait(now)
        fetches = self._send_fetches(fetch_plan, wait_ms)
        produces = self._send_produces(produce_plan)
        self._receive_produces(produces)
        self._receive_fetches(fetches)
        self._publish_offsets()
        if self._needs_new_pid:
            self._reset_producer_id()
        return True

    def _fetch_wait(self, now: float) -> int:
        """Long-poll, but not past the moment a backed-off produce retry is due."""
        retry = [pm.produce_retry_at for pm in self.partitions.values() if pm.unacked(1)]
        if not retry:
            return self.fetch_wait_ms
        return int(max(0.0, min(self.fetch_wait_ms / 1000, min(retry) - now)) * 1000)

    # ------------------------------------------------------------------ producer id
    def _ensure_producer_id(self, now: float) -> bool:
        if self.producer_id is not None:
            return True
        if now < self._pid_retry_at:
            return False
        try:
            self.producer_id, self.producer_epoch = self.target.init_producer_id()
        except ClientError as e:
            self._pid_failures += 1
            self._pid_retry_at = now + backoff(self._pid_failures)
            self.metrics.error("init_producer_id")
            log.warning("mirror stream %d: no producer id from the offline cluster yet (%s)", self.index, e)
            return False
        self._pid_failures = 0
        log.info("mirror stream %d: producer id %d epoch %d", self.index, self.producer_id, self.producer_epoch)
        return True

    def _reset_producer_id(self) -> None:
        """The offline cluster refused our sequence: take a new producer id and re-stamp unacked batches.

        Batches sent before may then be written twice (duplicates), never lost.
        """
        old = self.producer_id
        try:
            pid, epoch = self.target.init_producer_id()
        except ClientError as e:
            log.warning("mirror stream %d: cannot get a new producer id yet (%s)", self.index, e)
            self.metrics.error("init_producer_id")
            self._pid_failures += 1
            self._pid_retry_at = time.monotonic() + backoff(self._pid_failures)
            return  # keep _needs_new_pid; produces wait for it (see _plan_produces)
        self._pid_failures = 0
        self._needs_new_pid = False
        self.producer_id, self.producer_epoch = pid, epoch
        self.sequences.clear()
        self._rewind.clear()
        for tp, pm in self.partitions.items():
            seq = 0
            for b in pm.pending:
                if b.acked:
                    continue
                restamp(b.buf, b.start, b.size, pid, epoch, seq)
                b.sequence = seq
                b.uncertain = False  # a new producer id: nothing to deduplicate against
                seq = next_sequence(seq, b.header)
            self.sequences[tp] = seq
        self.metrics.producer_resets.inc()
        log.warning("mirror stream %d: producer id %s -> %d after a refused sequence; unacknowledged batches "
                    "re-stamped (they may be duplicated, never lost)", self.index, old, pid)

    # ------------------------------------------------------------------ metadata
    def _refresh_metadata(self, now: float) -> None:
        topics = sorted({tp[0] for tp in self.partitions})
        if self._source_stale and now >= self._source_refreshed:
            self._source_stale, self._source_refreshed, self._source_md_failures = self._refresh(
                self.source, "live", topics, now, self._source_md_failures)
        if self._target_stale and now >= self._target_refreshed:
            self._target_stale, self._target_refreshed, self._target_md_failures = self._refresh(
                self.target, "offline", topics, now, self._target_md_failures)

    def _refresh(self, client: WireClient, which: str, topics: list[str], now: float,
                 failures: int) -> tuple[bool, float, int]:
        """Returns (still stale, earliest next refresh, consecutive failures)."""
        try:
            client.refresh_metadata(topics)
            return False, now + METADATA_MIN_INTERVAL_S, 0
        except ClientError as e:
            failures += 1
            self.metrics.error(f"{which}_metadata")
            if failures in (1, 10) or failures % 100 == 0:
                log.warning("mirror stream %d: %s metadata unavailable (%d times in a row; retrying): %s",
                            self.index, which, failures, e)
            return True, now + max(METADATA_MIN_INTERVAL_S, backoff(failures)), failures

    # ------------------------------------------------------------------ fetch
    def _plan_fetches(self, now: float) -> dict[int, dict[str, list[PartitionMirror]]]:
        plan: dict[int, dict[str, list[PartitionMirror]]] = {}
        if sum(pm.pending_size for pm in self.partitions.values()) >= MAX_STREAM_PENDING_BYTES:
            return plan  # the offline side is behind: produce what we hold first
        for pm in self.partitions.values():
            if pm.fetch_retry_at > now or pm.pending_size >= MAX_PENDING_BYTES:
                continue
            if pm.fetch_offset is None and not self._resolve_start(pm, now):
                continue
            leader = self.source.leaders.get(pm.tp)
            if leader is None:
                self._source_stale = True
                pm.fetch_failed(now)
                continue
            plan.setdefault(leader, {}).setdefault(pm.topic, []).append(pm)
        return plan

    def _resolve_start(self, pm: PartitionMirror, now: float) -> bool:
        """No committed offset: start at the live log start (mirror everything retained)."""
        res = self.source.list_offsets({pm.tp: EARLIEST_TIMESTAMP}).get(pm.tp)
        if res is None or res.error_code != ErrorCode.NONE or res.offset < 0:
            self._source_stale = True
            pm.fetch_failed(now)
            return False
        pm.fetch_offset = res.offset
        log.info("%s-%d: no committed offset; starting at the live log start %d", pm.topic, pm.partition,
                 res.offset)
        return True

    def _send_fetches(self, plan: dict[int, dict[str, list[PartitionMirror]]], wait_ms: int) -> list:
        sent = []
        for node, topics in plan.items():
            req = [(t, [FetchPartition(pm.partition, pm.fetch_offset, pm.fetch_bytes) for pm in pms])
                   for t, pms in topics.items()]
            for pms in topics.values():
                for pm in pms:
                    pm.fetch_sent_offset = pm.fetch_offset
            try:
                conn = self.source.connection(node)
                conn.send(*fetch_request(req, wait_ms, 1, FETCH_RESPONSE_MAX_BYTES))
            except ClientError as e:
                self._fetch_connection_failed(node, topics, e)
                continue
            sent.append((node, conn, topics))
        return sent

    def _fetch_connection_failed(self, node: int, topics: dict[str, list[PartitionMirror]], err: Exception) -> None:
        now = time.monotonic()
        self.source.close_connection(node)
        self._source_stale = True
        self.metrics.error("fetch")
        pms = [pm for group in topics.values() for pm in group]
        for pm in pms:
            pm.fetch_failed(now)
        n = pms[0].fetch_failures if pms else 0
        if n in (1, 10) or n % 100 == 0:
            log.warning("fetch from live broker %d failed (%d times in a row, %d partitions): %s", node, n,
                        len(pms), err)

    def _receive_fetches(self, sent: list) -> None:
        for node, conn, topics in sent:
            try:
                body = conn.receive(timeout_s=self.source.timeout_s + self.fetch_wait_ms / 1000)
                resp = parse_fetch(body)
            except (ClientError, ProtocolError) as e:
                self._fetch_connection_failed(node, topics, e)
                continue
            by_tp = {(t, r.partition): r for t, results in resp.topics.items() for r in results}
            now = time.monotonic()
            for t, pms in topics.items():
                for pm in pms:
                    res = by_tp.get((t, pm.partition))
                    if res is None:
                        pm.fetch_failed(now)
                        continue
                    self._handle_fetch_result(pm, res, now)

    def _handle_fetch_result(self, pm: PartitionMirror, res, now: float) -> None:
        if pm.fetch_sent_offset != pm.fetch_offset:
            return  # the partition was rewound while this fetch was out (a split): fetched again next round
        err = res.error_code
        if err == ErrorCode.NONE:
            if res.high_watermark >= 0:
                pm.high_watermark = res.high_watermark
            records = res.records
            if records is not None and len(records):
                self._accept_records(pm, records, now)
            else:
                pm.fetch_failures = 0
            return
        if err == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._offset_out_of_range(pm, now)
            return
        self.metrics.error("fetch")
        if err in LEADERSHIP_ERRORS:
            self._source_stale = True
        pm.fetch_failed(now)
        if pm.fetch_failures in (1, 10) or pm.fetch_failures % 100 == 0:
            log.warning("fetch %s-%d at %s: %s (attempt %d, retrying)", pm.topic, pm.partition, pm.fetch_offset,
                        _name(err), pm.fetch_failures)

    def _accept_records(self, pm: PartitionMirror, records: memoryview, now: float) -> None:
        assert self.producer_id is not None and pm.fetch_offset is not None
        seq = self.sequences.get(pm.tp, 0)
        try:
            fw = forward_batches(records, pm.fetch_offset, self.producer_id, self.producer_epoch, seq,
                                 self.coalesce_limits.get(pm.tp, self.coalesce_bytes))
        except CorruptBatchError as e:
            self.metrics.error("corrupt_batch")
            pm.fetch_failed(now)
            log.error("%s-%d: corrupt batch fetched from the live cluster at offset %d (%s); re-fetching, "
                      "nothing is skipped", pm.topic, pm.partition, e.offset, e)
            return
        for (start, size), h, resume, end, coalesced in zip(fw.spans, fw.headers, fw.resume_offsets,
                                                            fw.end_offsets, fw.coalesced, strict=True):
            pm.add_pending(PendingBatch(fw.records, start, size, h, resume, seq, end_offset=end,
                                        coalesced=coalesced))
            seq = next_sequence(seq, h)
        self.sequences[pm.tp] = fw.next_sequence
        if fw.empty and fw.truncated and fw.next_offset == pm.fetch_offset:
            pm.fetch_bytes = min(pm.fetch_bytes * 2, MAX_FETCH_BYTES)  # one batch bigger than we asked for
        pm.fetch_offset = fw.next_offset
        pm.fetch_failures = 0

    def _offset_out_of_range(self, pm: PartitionMirror, now: float) -> None:
        got = self.source.list_offsets({pm.tp: EARLIEST_TIMESTAMP})
        latest = self.source.list_offsets({pm.tp: LATEST_TIMESTAMP})
        e, lt = got.get(pm.tp), latest.get(pm.tp)
        if e is None or lt is None or e.error_code or lt.error_code:
            self._source_stale = True
            pm.fetch_failed(now)
            return
        offset = pm.fetch_offset if pm.fetch_offset is not None else -1
        if offset < e.offset:
            lost = e.offset - offset
            self.metrics.data_lost.labels(pm.topic).inc(lost)
            log.error("DATA LOST: %s-%d: live log now starts at %d but the mirror had only reached %d; %d "
                      "messages were deleted by retention before they were mirrored. Continuing from %d.",
                      pm.topic, pm.partition, e.offset, offset, lost, e.offset)
        elif offset > lt.offset:
            self.metrics.offset_resets.labels(pm.topic).inc()
            log.error("%s-%d: offset %d is past the live log end %d (topic re-created or log truncated); "
                      "restarting from the log start %d (duplicates possible, no loss)", pm.topic, pm.partition,
                      offset, lt.offset, e.offset)
        else:
            pm.fetch_failed(now)  # raced with retention or a restart: just ask again
            return
        pm.fetch_offset = e.offset
        pm.fetch_failures = 0

    # ------------------------------------------------------------------ produce
    def _plan_produces(self, now: float) -> dict[int, list[list[Slot]]]:
        """Per offline leader, the produce requests to send in order.

        A partition has at most MAX_IN_FLIGHT batches in flight: the offline broker remembers that many
        per producer, so any retry is recognised. They normally travel together in one request (one
        append, one fsync). The broker's dedupe treats a whole payload as a duplicate if one of its
        batches is, so batches whose earlier attempt has an unknown outcome are resent one per request
        (request j holds the j-th of them): a partly written earlier attempt is then completed exactly.
        """
        if self._needs_new_pid:
            return {}
        per_node: dict[int, list[list[Slot]]] = {}
        for pm in self.partitions.values():
            if pm.produce_retry_at > now:
                continue
            batches = pm.unacked(MAX_IN_FLIGHT)
            if not batches:
                continue
            leader = self.target.leaders.get(pm.tp)
            if leader is None:
                self._target_stale = True
                if pm.produce_failures in (0, 9):
                    log.info("%s-%d: no leader in the offline cluster yet (topic being created?)", pm.topic,
                             pm.partition)
                pm.produce_failed(now)
                continue
            if any(b.uncertain for b in batches):
                slots = [(pm, [b]) for b in batches]
            else:
                slots, group, size = [], [], 0
                for b in batches:
                    if group and size + b.size > MAX_PARTITION_PRODUCE_BYTES:
                        slots.append((pm, group))
                        group, size = [], 0
                    group.append(b)
                    size += b.size
                slots.append((pm, group))
            per_node.setdefault(leader, []).append(slots)
        plan: dict[int, list[list[Slot]]] = {}
        for node, per_partition in per_node.items():
            requests: list[list[Slot]] = []
            for j in range(MAX_IN_FLIGHT):
                current: list[Slot] = []
                size = 0
                for slots in per_partition:
                    if j < len(slots):
                        slot = slots[j]
                        slot_size = sum(b.size for b in slot[1])
                        if current and size + slot_size > MAX_PRODUCE_REQUEST_BYTES:
                            requests.append(current)
                            current, size = [], 0
                        current.append(slot)
                        size += slot_size
                if current:
                    requests.append(current)
            plan[node] = requests
        return plan

    def _send_produces(self, plan: dict[int, list[list[Slot]]]) -> list:
        sent = []
        for node, requests in plan.items():
            try:
                conn = self.target.connection(node)
            except ClientError as e:
                self._produce_connection_failed(node, [], [s for req in requests for s in req], e)
                continue
            ok: list[list[Slot]] = []
            for i, req in enumerate(requests):
                by_topic: dict[str, list[tuple[int, list[memoryview]]]] = {}
                for pm, batches in req:
                    by_topic.setdefault(pm.topic, []).append((pm.partition, [b.view() for b in batches]))
                try:
                    conn.send(*produce_request(by_topic.items(), -1, int(self.target.timeout_s * 750)))
                except ClientError as e:
                    # the connection is gone with everything sent on it: those outcomes are unknown
                    self._produce_connection_failed(node, [s for r in ok for s in r] + list(req),
                                                    [s for r in requests[i + 1:] for s in r], e)
                    ok = []
                    break
                ok.append(req)
            if ok:
                sent.append((node, conn, ok))
        return sent

    def _produce_connection_failed(self, node: int, unknown: list[Slot], unsent: list[Slot],
                                   err: Exception) -> None:
        now = time.monotonic()
        self.target.close_connection(node)
        self._target_stale = True
        self.metrics.error("produce")
        for _pm, batches in unknown:
            for b in batches:
                b.uncertain = True
        for pm in {id(pm): pm for pm, _ in unknown + unsent}.values():
            pm.produce_failed(now)
            if pm.produce_failures in (1, 10) or pm.produce_failures % 100 == 0:
                log.warning("produce to offline broker %d failed (%d times in a row for %s-%d): %s", node,
                            pm.produce_failures, pm.topic, pm.partition, err)

    def _receive_produces(self, sent: list) -> None:
        for node, conn, requests in sent:
            failed_this_round: set[TopicPartition] = set()
            for i, req in enumerate(requests):
                try:
                    results = parse_produce(conn.receive())
                except (ClientError, ProtocolError) as e:
                    self._produce_connection_failed(node, [s for r in requests[i:] for s in r], [], e)
                    break
                by_tp = {(t, r.partition): r for t, rs in results.items() for r in rs}
                now = time.monotonic()
                for pm, batches in req:
                    res = by_tp.get(pm.tp)
                    code = res.error_code if res is not None else ErrorCode.UNKNOWN_SERVER_ERROR
                    if not self._handle_produce_result(pm, batches, code, res, pm.tp in failed_this_round, now):
                        failed_this_round.add(pm.tp)
        for pm in self.partitions.values():
            pm.drop_acked_prefix()

    def _handle_produce_result(self, pm: PartitionMirror, batches: list[PendingBatch], code: int, res,
                               after_failure: bool, now: float) -> bool:
        """Apply one partition's answer to the batches it carried; True if they are acknowledged."""
        if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
            pm.produce_failures = 0
            for b in batches:
                b.acked = True
                self._tally(pm, b)
                self.metrics.messages.labels(pm.topic).inc(b.header.records_count)
                self.metrics.bytes.labels(pm.topic).inc(b.size)
            return True
        if code in UNKNOWN_OUTCOME_ERRORS:
            for b in batches:
                b.uncertain = True
        if after_failure and code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            return False  # an earlier request of this partition failed in this round: this one follows it
        message = getattr(res, "error_message", None) or ""
        if code in TOO_LARGE_ERRORS and self._split_refused(pm, batches, message):
            return False
        self.metrics.error("produce")
        pm.produce_failed(now)
        first = batches[0]
        if code in PRODUCER_STATE_ERRORS:
            self._needs_new_pid = True
            log.warning("%s-%d: offline broker refused sequence %d (%s %s)", pm.topic, pm.partition,
                        first.sequence, _name(code), message)
            return False
        if code in LEADERSHIP_ERRORS:
            self._target_stale = True
        level = logging.ERROR if code in FATAL_LOOKING else logging.WARNING
        if pm.produce_failures in (1, 10) or pm.produce_failures % 100 == 0:
            log.log(level, "produce %s-%d (source offset %d): %s %s (attempt %d, retrying; nothing is skipped)",
                    pm.topic, pm.partition, first.header.base_offset, _name(code), message, pm.produce_failures)
        return False

    def _split_refused(self, pm: PartitionMirror, batches: list[PendingBatch], message: str) -> bool:
        """The offline broker refused batches as too large: if one is coalesced, undo the coalescing.

        A definite refusal wrote nothing, and nothing after it can have been written either (the broker
        takes a producer's sequences only in order). So the refused batches and every later one are
        dropped, the partition is fetched again from the first of them under its sequence, and its
        sources are coalesced into batches at most half as big (down to not at all). This holds for a
        batch whose earlier attempt had an unknown outcome too: the offline broker answers a retry of a
        batch it wrote as a duplicate even when it would now be too large (Log.append), so a too-large
        answer means not written. A batch that is too large on its own is not split (returns False:
        logged at ERROR and retried like any refusal, never skipped).
        """
        if not any(b.coalesced for b in batches):
            return False
        first = batches[0]
        dropped = pm.drop_from(first)
        if not dropped:
            return True  # a later request of this partition in the same round: already split
        limit = self.coalesce_limits.get(pm.tp, self.coalesce_bytes)
        new_limit = min(limit, max(b.size for b in batches if b.coalesced)) // 2
        if new_limit < MIN_COALESCE_BYTES:
            new_limit = 0
        self.coalesce_limits[pm.tp] = new_limit
        pm.fetch_offset = first.resume_offset
        self.sequences[pm.tp] = first.sequence
        pm.fetch_retry_at = 0.0
        self.metrics.error("coalesced_too_large")
        log.warning("%s-%d: the offline broker refused a coalesced batch of %d bytes as too large (%s); "
                    "fetching again from offset %d and coalescing to at most %d bytes%s", pm.topic,
                    pm.partition, max(b.size for b in batches), message or "MESSAGE_TOO_LARGE",
                    first.resume_offset, new_limit, " (that is, not at all)" if new_limit == 0 else "")
        return True

    def _tally(self, pm: PartitionMirror, b: PendingBatch) -> None:
        """Audit-count an acknowledged batch. Records that do not parse (the CRC was right, so the live
        producer wrote them so) are counted in the bucket of the batch's first timestamp: the books
        balance in total, and the batch is mirrored unchanged like any other."""
        try:
            tally_batches(self.count, pm.topic, b.buf, [(b.start, b.size)], [b.header])
        except BatchWalkError as e:
            self.metrics.error("audit_walk")
            log.error("%s-%d: batch at source offset %d (%d records) does not parse (%s); mirrored unchanged, "
                      "counted in the bucket of its first timestamp", pm.topic, pm.partition,
                      b.header.base_offset, b.header.records_count, e)
            self.count(pm.topic, b.header.base_timestamp, b.header.records_count)


def stream_for(tp: TopicPartition, streams: int) -> int:
    """Which stream mirrors a partition: stable across rebalances, spreading one topic's partitions."""
    topic, partition = tp
    h = 0
    for ch in topic.encode():
        h = (h * 31 + ch) & 0x7FFFFFFF
    return (h + partition) % streams


StreamFactory = Callable[[int], MirrorStream]
