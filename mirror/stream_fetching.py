"""StreamFetcher: the fetching half of a mirror stream: which partitions to fetch from which live broker,
and what to do with each answer (rewrite its batches into the partition's pipeline)."""

from __future__ import annotations

import time
from collections.abc import Callable

from ferry.client.errors import ClientError
from ferry.client.wire_client import LEADERSHIP_ERRORS, WireClient
from ferry.mirror.batch_rewrite import CorruptBatchError, forward_batches, next_sequence
from ferry.mirror.cluster_view import ClusterView
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_limits import (
    FETCH_RESPONSE_MAX_BYTES,
    MAX_PENDING_BYTES,
    MAX_STREAM_PENDING_BYTES,
    MIN_COALESCE_BYTES,
    code_name,
    log,
)
from ferry.mirror.partition_mirror import (
    MAX_FETCH_BYTES,
    SYNCED,
    PartitionMirror,
    PendingBatch,
    TopicPartition,
)
from ferry.mirror.stream_session import StreamSession
from ferry.wire.protocol import fetch
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.fetch import FetchPartition, PartitionFetchResult
from ferry.wire.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from ferry.wire.protocol.primitives import ProtocolError
from ferry.wire.record.read_committed import ReadCommitted

FetchPlan = dict[int, dict[str, list[PartitionMirror]]]  # live node -> topic -> partitions


class StreamFetcher:
    """Fetches the owned partitions from their live leaders (read_committed) and rewrites what comes back
    into pending batches under the mirror's producer id, coalescing runs of small ones.

    Owns the fetch buffers (one per live node: forward_batches copies what it keeps) and the coalesce limit
    per partition, lowered when the offline broker refuses a coalesced batch as too large (`refetch_smaller`).
    ``unsent`` lists the offline connections with produce requests still being written: they are pushed
    while a fetch answer comes in.
    """

    def __init__(self, source: ClusterView, session: StreamSession, metrics: MirrorMetrics,
                 partitions: dict[TopicPartition, PartitionMirror], fetch_wait_ms: int, coalesce_bytes: int,
                 unsent: Callable[[], list]) -> None:
        self.source: WireClient = source.client
        self.source_view = source
        self.session = session
        self.metrics = metrics
        self.partitions = partitions  # the stream's owned partitions (its coordinator adds and removes them)
        self.fetch_wait_ms = fetch_wait_ms
        self.coalesce_bytes = coalesce_bytes
        # partition -> a lower coalesce limit, learnt from the offline broker refusing a coalesced batch
        self.coalesce_limits: dict[TopicPartition, int] = {}
        self.unsent = unsent
        self._buffers: dict[int, bytearray] = {}  # live node -> the buffer its fetch answers are received into

    def release_buffers(self) -> None:
        """An idle stream holds no fetch buffers."""
        self._buffers.clear()

    def fetch_wait(self, now: float) -> int:
        """Long-poll, but not past the moment a backed-off produce retry is due."""
        retry = [pm.produce_retry_at if pm.sync == SYNCED else pm.sync_retry_at for pm in self.partitions.values()
                 if pm.sync != SYNCED or pm.unacked(1)]
        if not retry:
            return self.fetch_wait_ms
        return int(max(0.0, min(self.fetch_wait_ms / 1000, min(retry) - now)) * 1000)

    # ------------------------------------------------------------------ fetch
    def plan(self, now: float) -> FetchPlan:
        plan: FetchPlan = {}
        if sum(pm.pending_size for pm in self.partitions.values()) >= MAX_STREAM_PENDING_BYTES:
            return plan  # the offline side is behind: produce what we hold first
        for pm in self.partitions.values():
            if pm.sync != SYNCED or pm.fetch_retry_at > now or pm.pending_size >= MAX_PENDING_BYTES:
                continue
            leader = self.source.leaders.get(pm.tp)
            if leader is None:
                self.source_view.stale = True
                pm.fetch_failed(now)
                continue
            plan.setdefault(leader, {}).setdefault(pm.topic, []).append(pm)
        return plan

    def send(self, plan: FetchPlan, wait_ms: int) -> list:
        sent = []
        for node, topics in plan.items():
            req = [(t, [FetchPartition(pm.partition, pm.fetch_offset, pm.fetch_bytes) for pm in pms])
                   for t, pms in topics.items()]
            for pms in topics.values():
                for pm in pms:
                    pm.fetch_sent_offset = pm.fetch_offset
            try:
                conn = self.source.connection(node)
                conn.send(*fetch.encode_request(req, wait_ms, 1, FETCH_RESPONSE_MAX_BYTES,
                                                isolation_level=fetch.READ_COMMITTED))
            except ClientError as e:
                self._fetch_connection_failed(node, topics, e)
                continue
            sent.append((node, conn, topics))
        return sent

    def _fetch_connection_failed(self, node: int, topics: dict[str, list[PartitionMirror]], err: Exception) -> None:
        now = time.monotonic()
        self.source.close_connection(node)
        self.source_view.stale = True
        self.metrics.error("fetch")
        pms = [pm for group in topics.values() for pm in group]
        for pm in pms:
            pm.fetch_failed(now)
        n = pms[0].fetch_failures if pms else 0
        if n in (1, 10) or n % 100 == 0:
            log.warning("fetch from live broker %d failed (%d times in a row, %d partitions): %s", node, n,
                        len(pms), err)

    def receive(self, sent: list) -> None:
        for node, conn, topics in sent:
            # the produce requests still being written go out while the answer comes in
            pushing = self.unsent()
            try:
                body = conn.receive(timeout_s=self.source.timeout_s + self.fetch_wait_ms / 1000,
                                    into=self._buffers.setdefault(node, bytearray()), push=pushing)
                resp = fetch.parse_response(body)
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

    def _handle_fetch_result(self, pm: PartitionMirror, res: PartitionFetchResult, now: float) -> None:
        if pm.sync != SYNCED or pm.fetch_sent_offset != pm.fetch_offset:
            return  # rewound (a split) or to be synced while this fetch was out: fetched again later
        err = res.error_code
        if err == ErrorCode.NONE:
            if res.high_watermark >= 0:
                pm.high_watermark = res.high_watermark
            records = res.records
            if records is not None and len(records):
                self._accept_records(pm, records, ReadCommitted(res.aborted_transactions), now)
            else:
                pm.fetch_failures = 0
            return
        if err == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._offset_out_of_range(pm, now)
            return
        self.metrics.error("fetch")
        if err in LEADERSHIP_ERRORS:
            self.source_view.stale = True
        pm.fetch_failed(now)
        if pm.fetch_failures in (1, 10) or pm.fetch_failures % 100 == 0:
            log.warning("fetch %s-%d at %s: %s (attempt %d, retrying)", pm.topic, pm.partition, pm.fetch_offset,
                        code_name(err), pm.fetch_failures)

    def refetch_smaller(self, pm: PartitionMirror, first: PendingBatch, refused_size: int) -> int:
        """Fetch ``pm`` again from ``first`` (dropped, with everything after it) under its sequence, coalescing
        into batches at most half the size of the refused coalesced one (down to not at all); returns the
        new limit."""
        limit = self.coalesce_limits.get(pm.tp, self.coalesce_bytes)
        new_limit = min(limit, refused_size) // 2
        if new_limit < MIN_COALESCE_BYTES:
            new_limit = 0
        self.coalesce_limits[pm.tp] = new_limit
        pm.fetch_offset = first.resume_offset
        pm.next_seq = first.sequence
        pm.fetch_retry_at = 0.0
        return new_limit

    def _accept_records(self, pm: PartitionMirror, records: memoryview, committed: ReadCommitted,
                        now: float) -> None:
        producer_id = self.session.producer_id
        assert producer_id is not None and pm.fetch_offset is not None
        seq = pm.next_seq
        try:
            fw = forward_batches(records, pm.fetch_offset, producer_id, pm.epoch, seq,
                                 self.coalesce_limits.get(pm.tp, self.coalesce_bytes), committed)
        except CorruptBatchError as e:
            self.metrics.error("corrupt_batch")
            pm.fetch_failed(now)
            log.error("%s-%d: corrupt batch fetched from the live cluster at offset %d (%s); re-fetching, "
                      "nothing is skipped", pm.topic, pm.partition, e.offset, e)
            return
        for (start, size), h, resume, end, coalesced, counts in zip(
                fw.spans, fw.headers, fw.resume_offsets, fw.end_offsets, fw.coalesced, fw.counts, strict=True):
            pm.add_pending(PendingBatch(fw.records, start, size, h, resume, seq, end_offset=end,
                                        coalesced=coalesced, counts=counts))
            seq = next_sequence(seq, h)
        pm.next_seq = fw.next_sequence
        if fw.empty and fw.truncated and fw.next_offset == pm.fetch_offset:
            pm.fetch_bytes = min(pm.fetch_bytes * 2, MAX_FETCH_BYTES)  # one batch bigger than we asked for
        pm.fetch_offset = fw.next_offset
        pm.fetch_failures = 0

    def _offset_out_of_range(self, pm: PartitionMirror, now: float) -> None:
        got = self.source.list_offsets({pm.tp: EARLIEST_TIMESTAMP})
        latest = self.source.list_offsets({pm.tp: LATEST_TIMESTAMP})
        e, lt = got.get(pm.tp), latest.get(pm.tp)
        if e is None or lt is None or e.error_code or lt.error_code:
            self.source_view.stale = True
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
