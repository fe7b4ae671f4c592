"""ProduceApis: the Produce handler. Every Produce request comes here; the common shape (one topic, one
partition, an answer wanted, no transaction) is taken by ProduceFastPath straight from the frame, everything
else and everything the fast path declines by the general path below, which parses the whole request and
answers each partition with its precise error.

Both paths decide acks and accept a partition with the same functions (produce_rules.py) and append through
ReplicaManager, which wakes parked fetches after every append.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.log_flusher import LogFlusher
from ferry.broker.server.partition import Partition
from ferry.broker.server.produce_fast_path import ProduceFastPath
from ferry.broker.server.produce_parse import FIRST_VERSION, LAST_VERSION, Parsed
from ferry.broker.server.produce_rules import ack_mode, produce_target
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.request_context import RequestContext, Session
from ferry.broker.server.request_metrics import PRODUCE, count_error
from ferry.broker.server.request_result import CloseConnection, Result
from ferry.wire.protocol import produce
from ferry.wire.protocol.acl_types import AclOperation, ResourceType
from ferry.wire.protocol.api_keys import ApiKey, is_served
from ferry.wire.protocol.errors import ErrorCode, error_code_of
from ferry.wire.protocol.primitives import Reader
from ferry.wire.record.record_batch import TRANSACTIONAL_MASK

log = logging.getLogger(__name__)

class HasSession(Protocol):
    """A connection: who sent its requests."""

    session: Session


PartitionResults = list[tuple[str, list[produce.PartitionProduceResult]]]


class ProduceApis:
    """Produce (key 0): the fast path first, the general path for the rest."""

    def __init__(self, replicas: ReplicaManager, flusher: LogFlusher, authorizer: Authorizer | None = None) -> None:
        self._replicas = replicas
        self._flusher = flusher
        self._authz = authorizer if authorizer is not None else Authorizer()
        self.fast = ProduceFastPath(replicas, flusher)
        self.topic_bytes = self.fast.topic_bytes  # record bytes appended per topic, by either path (metrics)
        self.topic_messages = self.fast.topic_messages  # records appended per topic, by either path (metrics)
        self.error_codes = self.fast.error_codes  # (api key, error code) -> partitions answered with it (metrics)
        # per request, for callers without a connection: the whole framed answer, or None (then handle_produce).
        # Not knowing who sent a frame, they decline every Produce when an authorizer is on.
        self.handle_framed = self.fast.handle_framed if not self._authz.enabled else _decline
        self.handle_run = self.fast.handle_run if not self._authz.enabled else _decline_run

    def fast_path_for(self, conn: HasSession) -> tuple[Callable[..., bytes | Awaitable[bytes] | None],
                                                       Callable[[list], list]]:
        """The fast path's (handle_framed, handle_run) for one connection: as they are without an authorizer
        (nothing added per request); with one, checking Write on the topic for the connection's principal
        (read at each request: an authentication may change it). A denied request goes to the general path,
        which answers TOPIC_AUTHORIZATION_FAILED and logs the denial."""
        fast = self.fast
        if not self._authz.enabled:
            return fast.handle_framed, fast.handle_run
        authorize = self._authz.authorize_session

        def allowed(topic: str) -> bool:
            return authorize(conn.session, AclOperation.WRITE, ResourceType.TOPIC, topic)

        def handle_framed(frame: bytes | bytearray, parsed: Parsed | None = None) -> bytes | Awaitable[bytes] | None:
            return fast.handle_framed(frame, parsed, allowed)

        def handle_run(frames: list) -> list:
            return fast.handle_run(frames, allowed)

        return handle_framed, handle_run

    def handle_fast(self, frame: bytes | bytearray, version: int) -> bytes | Awaitable[bytes] | None:
        """The fast path's answer body for ``frame`` (a Produce of ``version``), or None: use handle_produce."""
        if FIRST_VERSION <= version <= LAST_VERSION and not self._authz.enabled:  # with one: fast_path_for
            return self.fast.handle(frame, version)
        return None

    def handle_produce(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = produce.parse_request(r, version)
        served = is_served(ApiKey.PRODUCE, version)
        mode = ack_mode(req.acks)
        allow = 0 if req.transactional_id is None else TRANSACTIONAL_MASK  # transactional batches need an id
        results: PartitionResults = []
        to_flush: list[tuple[Partition, int, produce.PartitionProduceResult]] = []
        failed = False
        replicas = self._replicas
        authz = self._authz
        denied_all = authz.enabled and req.transactional_id is not None and not authz.authorize(
            request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id)
        for topic, partitions in req.topics:
            tres = []
            denied = 0
            if denied_all:
                denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif authz.enabled and not authz.authorize(request, AclOperation.WRITE, ResourceType.TOPIC, topic):
                denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            for partition, records in partitions:
                res = produce.PartitionProduceResult(partition)
                tres.append(res)
                if denied:
                    res.error_code = denied
                elif not served:
                    res.error_code = ErrorCode.UNSUPPORTED_VERSION
                    res.error_message = "Produce v0-2 (message format v0/v1) is not supported; use v3+"
                else:
                    part, code, message = produce_target(replicas, topic, partition, mode,
                                                         len(records) if records else 0)
                    if code:
                        res.error_code = code
                        res.error_message = message
                    else:
                        end = self._append(part, topic, partition, records, res, allow)
                        if mode.waits_for_isr and end is not None:
                            to_flush.append((part, end, res))
                if res.error_code:
                    failed = True
                    count_error(self.error_codes, PRODUCE, res.error_code)
            results.append((topic, tres))
        if mode is not None and not mode.answers:
            if failed:
                raise CloseConnection("acks=0 produce failed: " + _describe_errors(results))
            return None
        if to_flush:
            return self._produce_after_flush(version, results, to_flush, req.timeout_ms)
        return produce.encode_response(version, results)

    def _append(self, part: Partition, topic: str, partition: int, records: memoryview,
                res: produce.PartitionProduceResult, allow: int = 0) -> int | None:
        """Append and fill in `res`; returns the end offset (exclusive) on success."""
        lg = part.log
        try:
            info = self._replicas.append(part, records, allow)
            tb = self.topic_bytes
            tb[topic] = tb.get(topic, 0) + len(records)
            if not info.duplicate:
                tm = self.topic_messages
                tm[topic] = tm.get(topic, 0) + info.last_offset - info.first_offset + 1
        except Exception as e:
            code = error_code_of(e)
            res.error_code = code
            res.error_message = str(e)[:500] or type(e).__name__
            if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                log.exception("append to %s-%d failed", topic, partition)
            elif code != ErrorCode.KAFKA_STORAGE_ERROR:  # a log dir failure is logged once, by the log layer
                log.warning("produce to %s-%d rejected (%s): %s", topic, partition, ErrorCode(code).name, e)
            return None
        res.base_offset = info.first_offset
        res.log_append_time = info.log_append_time
        res.log_start_offset = lg.log_start_offset
        return info.last_offset + 1

    async def _produce_after_flush(self, version: int, results: PartitionResults,
                                   to_flush: list[tuple[Partition, int, produce.PartitionProduceResult]],
                                   timeout_ms: int) -> bytes:
        """acks=-1: answer once the leader flushed and every ISR member has the batch (or say why not)."""
        outcomes = await asyncio.gather(*(self._replicas.acknowledge(part, end, timeout_ms, self._flusher)
                                          for part, end, _ in to_flush))
        for (_part, _end, res), (code, message) in zip(to_flush, outcomes, strict=True):
            if code:
                res.error_code = code
                res.error_message = message
                count_error(self.error_codes, PRODUCE, code)
        return produce.encode_response(version, results)


def _decline(frame: bytes | bytearray, parsed: object = None) -> None:
    return None


def _decline_run(frames: list) -> list:
    return []


def _describe_errors(results: PartitionResults) -> str:
    errs = [f"{t}-{p.partition}: {ErrorCode(p.error_code).name}" for t, ps in results for p in ps if p.error_code]
    return ", ".join(errs[:10])
