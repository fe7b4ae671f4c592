"""FetchApis: Fetch (consumers and followers, with long polls parked in the fetch purgatory) and ListOffsets
(earliest, latest, by time; read_committed: up to the last stable offset).

A fetch that finds less than its min_bytes waits, registered with the purgatory before it read, so no append
between its read and its wait is missed; it answers when enough arrived, at its max_wait_ms, or at the broker's
fetch.wait.max.ms. Followers (replica id >= 0) read up to the log end and report their progress to the
ReplicaManager; consumers read up to the high watermark (read_committed: the last stable offset).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.fetch_purgatory import FetchPurgatory
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_metrics import FETCH, count_error
from ferry.broker.server.request_result import Result
from ferry.wire.protocol import fetch, list_offsets
from ferry.wire.protocol.acl_types import AclOperation, ResourceType
from ferry.wire.protocol.errors import ErrorCode, error_code_of
from ferry.wire.protocol.primitives import Reader

log = logging.getLogger(__name__)

EMPTY = b""


class FetchApis:
    """Fetch and ListOffsets: reads of the logs this broker leads."""

    def __init__(self, replicas: ReplicaManager, purgatory: FetchPurgatory, wait_max_ms: int,
                 fetch_bytes: dict[str, int], authorizer: Authorizer | None = None) -> None:
        self._authz = authorizer if authorizer is not None else Authorizer()
        self._replicas = replicas
        self._purgatory = purgatory
        self._wait_max_ms = wait_max_ms  # fetch.wait.max.ms: the longest a fetch is parked
        self._fetch_bytes = fetch_bytes  # record bytes answered per topic (the broker's metrics read it)
        self.error_codes: dict[tuple[int, int], int] = {}  # (api key, error code) -> partitions answered with it

    # ------------------------------------------------------------------ Fetch
    def handle_fetch(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = fetch.parse_request(r, version)
        denied: list = []
        if self._authz.enabled:
            req, denied = self._authorized(request, req)
        results, total, errors = self._read_fetch(req)
        if errors or denied or total >= req.min_bytes or req.max_wait_ms <= 0:
            return self._fetch_answer(version, results + denied)
        keys = self._fetch_logs(req)
        if not keys:
            return self._fetch_answer(version, results)
        deadline = time.monotonic() + min(req.max_wait_ms, self._wait_max_ms) / 1000.0
        fut = self._purgatory.watch(keys)  # registered now, so no wake-up between this read and the wait is lost
        return self._delayed_fetch(version, req, keys, fut, deadline)

    def _authorized(self, request: RequestContext, req: fetch.FetchRequest) -> tuple[fetch.FetchRequest, list]:
        """The request cut to what the principal may read (a follower: ClusterAction; a consumer: Read on each
        topic), and the answers of the rest: TOPIC_AUTHORIZATION_FAILED."""
        authz = self._authz
        if req.replica_id >= 0:
            allowed = authz.authorize_cluster(request, AclOperation.CLUSTER_ACTION)
            keep = req.topics if allowed else []
        else:
            keep = [(t, ps) for t, ps in req.topics if authz.authorize(request, AclOperation.READ, ResourceType.TOPIC, t)]
        if len(keep) == len(req.topics):
            return req, []
        code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        denied = [(t, [fetch.PartitionFetchResult(p.partition, code, records=EMPTY) for p in ps])
                  for t, ps in req.topics if not any(t == k for k, _ in keep)]
        return dataclasses.replace(req, topics=keep), denied

    async def _delayed_fetch(self, version: int, req: fetch.FetchRequest, keys: list, fut: asyncio.Future,
                             deadline: float) -> list:
        purgatory = self._purgatory
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(fut, remaining)
                except TimeoutError:
                    break
                purgatory.unwatch(keys, fut)
                fut = purgatory.watch(keys)
                results, total, errors = self._read_fetch(req)
                if errors or total >= req.min_bytes:
                    return self._fetch_answer(version, results)
        finally:
            purgatory.unwatch(keys, fut)
        results, _total, _errors = self._read_fetch(req)
        return self._fetch_answer(version, results)

    def _fetch_answer(self, version: int, results: list) -> Result:
        """The encoded fetch response; counts its record bytes per topic (the answer actually sent, not the
        reads a long poll made and dropped)."""
        fb = self._fetch_bytes
        for topic, parts in results:
            n = sum(len(rec) if isinstance(rec := res.records, bytes | bytearray) else rec.size for res in parts)
            if n:
                fb[topic] = fb.get(topic, 0) + n
            for res in parts:
                if res.error_code:
                    count_error(self.error_codes, FETCH, res.error_code)
        return fetch.encode_response(version, results)

    def _fetch_logs(self, req: fetch.FetchRequest) -> list:
        out = []
        for topic, parts in req.topics:
            for fp in parts:
                part, _code = self._replicas.leader_partition(topic, fp.partition)
                if part is not None:
                    out.append(part.log)
        return out

    def _read_fetch(self, req: fetch.FetchRequest) -> tuple[list, int, bool]:
        budget = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
        total = 0
        errors = False
        first = True
        replicas = self._replicas
        follower = req.replica_id >= 0  # a replica fetcher: reads up to the log end, reports its progress
        committed = req.isolation_level == fetch.READ_COMMITTED and not follower  # up to the LSO only
        topics_out = []
        for topic, parts in req.topics:
            tres = []
            for fp in parts:
                part, code = replicas.leader_partition(topic, fp.partition)
                if not code and fp.current_leader_epoch >= 0 and fp.current_leader_epoch != part.leader_epoch:
                    code = (ErrorCode.FENCED_LEADER_EPOCH if fp.current_leader_epoch < part.leader_epoch
                            else ErrorCode.UNKNOWN_LEADER_EPOCH)
                if code:
                    tres.append(fetch.PartitionFetchResult(fp.partition, code, records=EMPTY))
                    errors = True
                    continue
                lg = part.log
                in_range = lg.log_start_offset <= fp.fetch_offset <= lg.log_end_offset
                if follower:
                    if in_range:  # a follower past our end has diverged: never count it as caught up
                        replicas.record_follower_fetch(part, req.replica_id, fp.fetch_offset)
                    hw = part.replication_hw
                    bound = lg.log_end_offset
                else:
                    hw = bound = lg.high_watermark
                lso = lg.last_stable_offset
                if committed:
                    bound = lso
                start = lg.log_start_offset
                res = fetch.PartitionFetchResult(fp.partition, 0, hw, lso, start, EMPTY)
                tres.append(res)
                offset = fp.fetch_offset
                if not in_range:
                    res.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    errors = True
                    continue
                if offset >= bound or budget <= 0 or fp.max_bytes <= 0:
                    continue
                try:
                    sl = lg.read(offset, min(fp.max_bytes, budget), bound)
                except Exception as e:
                    res.error_code = error_code_of(e)
                    errors = True
                    if res.error_code == ErrorCode.UNKNOWN_SERVER_ERROR:
                        log.exception("read of %s-%d at %d failed", topic, fp.partition, offset)
                    continue
                if sl is None or sl.size <= 0:
                    continue
                if not first and sl.size > budget:
                    continue  # only the first partition may exceed the response limit (KIP-74)
                first = False
                res.records = sl
                if committed:
                    res.aborted_transactions = lg.aborted_transactions(offset, bound)
                budget -= sl.size
                total += sl.size
            topics_out.append((topic, tres))
        return topics_out, total, errors

    # ------------------------------------------------------------------ ListOffsets
    def handle_list_offsets(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = list_offsets.parse_request(r, version)
        committed = req.isolation_level == 1  # read_committed: nothing past the last stable offset
        out = []
        authz = self._authz
        for topic, parts in req.topics:
            tres = []
            denied = authz.enabled and not authz.authorize(request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
            for partition, ts in parts:
                res = list_offsets.PartitionOffsetResult(partition)
                tres.append(res)
                if denied:
                    res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                lg, code = self._replicas.leader_log(topic, partition)
                if code:
                    res.error_code = code
                    continue
                try:
                    end = lg.last_stable_offset if committed else lg.high_watermark
                    if ts == list_offsets.EARLIEST_TIMESTAMP:
                        res.offset = lg.log_start_offset
                    elif ts == list_offsets.LATEST_TIMESTAMP:
                        res.offset = end
                    elif ts == list_offsets.MAX_TIMESTAMP and version >= list_offsets.MAX_TIMESTAMP_VERSION:
                        found = lg.max_timestamp_offset(end)
                        if found is not None:
                            res.offset, res.timestamp = found
                    elif ts < 0:
                        res.error_code = ErrorCode.INVALID_REQUEST  # -3 (max timestamp) before v7, or unknown
                    else:
                        found = lg.offset_for_timestamp(ts, end)
                        if found is not None and found[0] < end:
                            res.offset, res.timestamp = found
                except Exception as e:
                    res.error_code = error_code_of(e)
                    log.exception("ListOffsets on %s-%d failed", topic, partition)
            out.append((topic, tres))
        return list_offsets.encode_response(version, out)  # its error codes: counted by Writer.error_code
