"""StreamProducer: the producing half of a mirror stream: pending batches into produce requests to the
offline leaders, and each answer's consequences (acknowledged, retried, split, or a sync)."""

from __future__ import annotations

import logging
import time
from collections import deque

from ferry.client.errors import ClientError
from ferry.client.wire_client import LEADERSHIP_ERRORS, WireClient
from ferry.mirror.audit_tally import count_batch
from ferry.mirror.cluster_view import ClusterView
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_limits import (
    FATAL_LOOKING,
    MAX_PRODUCE_REQUEST_BYTES,
    PRODUCER_STATE_ERRORS,
    TOO_LARGE_ERRORS,
    UNKNOWN_OUTCOME_ERRORS,
    Slot,
    code_name,
    log,
)
from ferry.mirror.partition_mirror import (
    SYNC_FULL,
    SYNC_LOCAL,
    SYNCED,
    PartitionMirror,
    PendingBatch,
    TopicPartition,
)
from ferry.mirror.stream_fetching import StreamFetcher
from ferry.wire.protocol import produce
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import ProtocolError
from ferry.wire.protocol.produce import PartitionProduceResult

ProducePlan = dict[int, list[list[Slot]]]  # offline node -> its produce requests, in order


class StreamProducer:
    """Sends the owned partitions' pending batches to their offline leaders and applies the answers.

    Owns the produce requests in flight: per offline node, (connection, request, round, sent at), oldest
    first, answered in order. Requests stay in flight across rounds (up to ``max_in_flight`` batches per
    partition), so the next fetch does not wait for the offline cluster's acks=all. A coalesced batch refused
    as too large is handed back to ``fetcher`` to be fetched again, coalesced smaller.
    """

    def __init__(self, target: ClusterView, fetcher: StreamFetcher, metrics: MirrorMetrics,
                 partitions: dict[TopicPartition, PartitionMirror], max_in_flight: int) -> None:
        self.target: WireClient = target.client
        self.target_view = target
        self.fetcher = fetcher
        self.metrics = metrics
        self.partitions = partitions  # the stream's owned partitions (its coordinator adds and removes them)
        self.max_in_flight = max_in_flight  # batches per partition in flight, over as many rounds as it takes
        self._flying: dict[int, deque] = {}  # offline node -> deque of (connection, request, round, sent at)

    @property
    def in_flight(self) -> bool:
        """Whether produce answers are due."""
        return bool(self._flying)

    def unsent(self) -> list:
        """The connections with a produce request still being written (pushed while a fetch answer comes in)."""
        return [q[0][0] for q in self._flying.values() if q and q[0][0].unsent]

    # ------------------------------------------------------------------ produce
    def plan(self, now: float) -> ProducePlan:
        """Per offline leader, the produce requests to send in order.

        A partition has at most ``max_in_flight`` batches in flight (MAX_IN_FLIGHT: the offline broker
        remembers that many per producer, so any retry is recognised), sent over as many rounds as it takes:
        a round sends only the batches after those still in flight. Each request carries one batch per
        partition (request j the j-th of each): the broker's dedupe answers a whole payload as a duplicate
        if one of its batches is, which would swallow the others whenever that one was written by someone
        else (an earlier attempt, or another mirror that still thinks it owns the partition). One batch,
        one verdict. A partition whose batches in flight went to another broker waits for their answers
        (order holds per connection only).
        """
        per_node: dict[int, list[list[Slot]]] = {}
        for pm in self.partitions.values():
            if pm.sync != SYNCED or pm.produce_retry_at > now:
                continue
            batches = pm.sendable(1 if pm.solo else self.max_in_flight)
            if not batches:
                continue
            leader = self.target.leaders.get(pm.tp)
            if leader is None:
                self.target_view.stale = True
                if pm.produce_failures in (0, 9):
                    log.info("%s-%d: no leader in the offline cluster yet (topic being created?)", pm.topic,
                             pm.partition)
                pm.produce_failed(now)
                continue
            if pm.in_flight and pm.produce_node != leader:
                continue
            per_node.setdefault(leader, []).append([(pm, [b]) for b in batches])
        plan: ProducePlan = {}
        for node, per_partition in per_node.items():
            requests: list[list[Slot]] = []
            for j in range(max(len(slots) for slots in per_partition)):
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

    def send(self, plan: ProducePlan, round_no: int) -> None:
        """Send the planned requests; they join the node's requests in flight (answered in order)."""
        for node, requests in plan.items():
            flying = self._flying.get(node)
            if flying and flying[0][0].in_flight < len(flying):
                # the connection was replaced or closed: the answers in flight on it are lost
                self._produce_connection_failed(node, [], [], ClientError("connection closed"))
            try:
                conn = self.target.connection(node)
            except ClientError as e:
                self._produce_connection_failed(node, [], [s for req in requests for s in req], e)
                continue
            flying = self._flying.setdefault(node, deque())
            for i, req in enumerate(requests):
                by_topic: dict[str, list[tuple[int, list[memoryview]]]] = {}
                for pm, batches in req:
                    by_topic.setdefault(pm.topic, []).append((pm.partition, [b.view() for b in batches]))
                try:
                    conn.send(*produce.encode_request(by_topic.items(), -1, int(self.target.timeout_s * 750)),
                              wait=False)
                except ClientError as e:
                    # the connection is gone with everything sent on it: those outcomes are unknown
                    self._produce_connection_failed(node, list(req), [s for r in requests[i + 1:] for s in r], e)
                    break
                for pm, batches in req:
                    for b in batches:
                        b.in_flight = True
                    pm.in_flight += len(batches)
                    pm.produce_node = node
                flying.append((conn, req, round_no, time.monotonic()))

    def _landed(self, req: list[Slot]) -> None:
        """The answer to ``req`` is in (or lost with its connection): its batches are no longer in flight."""
        for pm, batches in req:
            for b in batches:
                b.in_flight = False
            pm.in_flight -= len(batches)

    def _produce_connection_failed(self, node: int, unknown: list[Slot], unsent: list[Slot],
                                   err: Exception) -> None:
        """Every request in flight on the node's connection is lost with it (outcome unknown: resent, and
        the broker's dedupe answers those it wrote), as are ``unknown`` (sent, not yet recorded)."""
        now = time.monotonic()
        self.target.close_connection(node)
        self.target_view.stale = True
        self.metrics.error("produce")
        for _conn, req, _rnd, _at in self._flying.pop(node, ()):
            self._landed(req)
            unknown = unknown + list(req)
        for _pm, batches in unknown:
            for b in batches:
                b.uncertain = True
        for pm in {id(pm): pm for pm, _ in unknown + unsent}.values():
            if self.partitions.get(pm.tp) is not pm:
                continue
            pm.produce_failed(now)
            if pm.produce_failures in (1, 10) or pm.produce_failures % 100 == 0:
                log.warning("produce to offline broker %d failed (%d times in a row for %s-%d): %s", node,
                            pm.produce_failures, pm.topic, pm.partition, err)

    def rounds_in_flight(self) -> int:
        """How many rounds' produce requests await their answers (the pipelining depth now)."""
        return len({entry[2] for q in self._flying.values() for entry in q})

    def receive(self, block: bool) -> None:
        """Read the produce answers that are there (``block``: at least the oldest of each broker's), apply
        them and move the acknowledged prefixes on."""
        for node in list(self._flying):
            flying = self._flying.get(node)
            must = block
            while flying:
                conn, req, _rnd, sent_at = flying[0]
                if conn.in_flight < len(flying):  # closed under us (a metadata refresh): answers lost
                    self._produce_connection_failed(node, [], [], ClientError("connection closed"))
                    break
                if not must and not conn.answer_ready():
                    if time.monotonic() - sent_at > self.target.timeout_s:  # request.timeout.ms: a hung broker
                        self._produce_connection_failed(node, [], [], ClientError(
                            f"no answer in {self.target.timeout_s:.0f} s"))
                    break
                must = False
                try:
                    results = produce.parse_response(conn.receive())
                except (ClientError, ProtocolError) as e:
                    self._produce_connection_failed(node, [], [], e)
                    break
                flying.popleft()
                self._landed(req)
                self._apply_answer(req, results)
            if not flying:
                self._flying.pop(node, None)
        self._settle()

    def drain(self) -> None:
        """Wait for every produce answer in flight (before a sync, a metadata refresh or a revoke, which
        need the offline connections idle and the partitions' acknowledged prefixes final)."""
        while self._flying:
            self.receive(True)

    def _apply_answer(self, req: list[Slot], results: dict[str, list[PartitionProduceResult]]) -> None:
        by_tp = {(t, r.partition): r for t, rs in results.items() for r in rs}
        now = time.monotonic()
        for pm, batches in req:
            if pm.sync != SYNCED or self.partitions.get(pm.tp) is not pm or batches[0].dropped:
                continue  # revoked, to be synced, or split back: these answers no longer matter
            res = by_tp.get(pm.tp)
            code = res.error_code if res is not None else ErrorCode.UNKNOWN_SERVER_ERROR
            self._handle_produce_result(pm, batches, code, res, pm.waiting_behind_failure(batches[0]), now)

    def _settle(self) -> None:
        """Move every partition's acknowledged prefix on, audit-counting what joined it."""
        for pm in self.partitions.values():
            for b in pm.drop_acked_prefix():
                if pm.count:
                    self._tally(pm, b)

    def _handle_produce_result(self, pm: PartitionMirror, batches: list[PendingBatch], code: int,
                               res: PartitionProduceResult | None,
                               after_failure: bool, now: float) -> bool:
        """Apply one partition's answer to the batches it carried; True if they are acknowledged."""
        if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
            base = res.base_offset if res is not None else -1
            if base < 0:  # acknowledged, but where it is we do not know: the offline log will say
                pm.sync = SYNC_LOCAL
                return False
            pm.produce_failures = 0
            pm.solo = False
            for b in batches:
                b.acked = True
                b.offline_offset = base
                base += b.header.last_offset_delta + 1
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
            # someone else's batch took this sequence (or our epoch is fenced): what is in the offline log
            # decides where to go on, never a new producer id (that would write those records again)
            pm.sync = SYNC_FULL if code == ErrorCode.INVALID_PRODUCER_EPOCH else SYNC_LOCAL
            pm.sync_retry_at = 0.0
            log.warning("%s-%d: offline broker refused sequence %d (%s %s); syncing from the offline log",
                        pm.topic, pm.partition, first.sequence, code_name(code), message)
            return False
        if code in LEADERSHIP_ERRORS:
            self.target_view.stale = True
        level = logging.ERROR if code in FATAL_LOOKING else logging.WARNING
        if pm.produce_failures in (1, 10) or pm.produce_failures % 100 == 0:
            log.log(level, "produce %s-%d (source offset %d): %s %s (attempt %d, retrying; nothing is skipped)",
                    pm.topic, pm.partition, first.header.base_offset, code_name(code), message, pm.produce_failures)
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
        new_limit = self.fetcher.refetch_smaller(pm, first, max(b.size for b in batches if b.coalesced))
        self.metrics.error("coalesced_too_large")
        log.warning("%s-%d: the offline broker refused a coalesced batch of %d bytes as too large (%s); "
                    "fetching again from offset %d and coalescing to at most %d bytes%s", pm.topic,
                    pm.partition, max(b.size for b in batches), message or "MESSAGE_TOO_LARGE",
                    first.resume_offset, new_limit, " (that is, not at all)" if new_limit == 0 else "")
        return True

    def _tally(self, pm: PartitionMirror, b: PendingBatch) -> None:
        """Audit-count a batch that joined the acknowledged prefix. Records that do not parse (the CRC was
        right, so the live producer wrote them so) are counted in the bucket of the batch's first
        timestamp: the books balance in total, and the batch is mirrored unchanged like any other. A
        coalesced batch's counts were made by the walk that built it (the same numbers, no second walk)."""
        if b.counts is not None:
            pm.counts.update(b.counts)
            return
        if not count_batch(pm.counts, b.view(), b.header):
            self.metrics.error("audit_walk")
            log.error("%s-%d: batch at source offset %d (%d records) does not parse; mirrored unchanged, "
                      "counted in the bucket of its first timestamp", pm.topic, pm.partition,
                      b.header.base_offset, b.header.records_count)
