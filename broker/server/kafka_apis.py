"""KafkaApis: one handler per API key, called by a connection with each request frame, in order.

`handle(frame)` runs synchronously on the event loop up to the point where a request would wait (an fsync
for acks=-1, a parked fetch, a ZooKeeper call): appends therefore happen in request order. It returns the
correlation id and one of: response body (`bytes`, or a list of parts with record slices for sendfile),
a coroutine producing such a body, or None (acks=0: no response). Bad requests raise CloseConnection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ferry.broker.server.admin_apis import AdminApis
from ferry.broker.server.broker_config import BrokerConfig
from ferry.broker.server.config_apis import ConfigApis
from ferry.broker.server.fetch_purgatory import FetchPurgatory
from ferry.broker.server.group_apis import GroupApis
from ferry.broker.server.log_flusher import LogFlusher
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.offset_apis import OffsetApis
from ferry.broker.server.produce_fast_path import FIRST_VERSION as FAST_PRODUCE_FIRST
from ferry.broker.server.produce_fast_path import LAST_VERSION as FAST_PRODUCE_LAST
from ferry.broker.server.produce_fast_path import ProduceFastPath
from ferry.broker.server.producer_id_manager import ProducerIdManager
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.replication_apis import ReplicationApis
from ferry.broker.server.request_metrics import RequestMetrics
from ferry.broker.server.topic_admin_apis import TopicAdminApis
from ferry.broker.server.transaction_apis import TransactionApis
from ferry.wire.protocol import (
    api_versions,
    fetch,
    metadata,
    produce,
)
from ferry.wire.protocol.api_keys import ADVERTISED, ApiKey, is_advertised, is_served
from ferry.wire.protocol.errors import ErrorCode, error_code_of
from ferry.wire.protocol.header import RequestHeader, peek_header, read_request_header
from ferry.wire.protocol.primitives import ProtocolError, Reader
from ferry.wire.record.record_batch import TRANSACTIONAL_MASK

log = logging.getLogger(__name__)

Result = bytes | list | Awaitable[Any] | None

EMPTY = b""


class CloseConnection(Exception):
    """The request cannot be answered (malformed, unknown API or version): log it and close the connection."""


class KafkaApis(AdminApis, OffsetApis, ReplicationApis, GroupApis, ConfigApis, TopicAdminApis, TransactionApis):
    def __init__(self, config: BrokerConfig, metadata_cache: MetadataCache, replicas: ReplicaManager,
                 registry: Any, producer_ids: ProducerIdManager, purgatory: FetchPurgatory,
                 flusher: LogFlusher, executor: Any = None, group_coordinator: Any = None) -> None:
        self.config = config
        self.metadata = metadata_cache
        self.replicas = replicas
        self.registry = registry
        self.producer_ids = producer_ids
        self.purgatory = purgatory
        self.flusher = flusher
        self.executor = executor
        self.group_coordinator = group_coordinator
        self.cluster_id = _cluster_id(config.zookeeper)
        self.fast_produce = ProduceFastPath(replicas, flusher)
        self.request_metrics = RequestMetrics()  # counted by Connection._dispatch, read at scrape time
        self.request_metrics.produce_bytes = self.fast_produce.topic_bytes
        self._handlers: dict[int, Callable[[RequestHeader, Reader], Result]] = {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            **self.group_handlers(),
            **self.config_handlers(),
            **self.topic_admin_handlers(),
            **self.transaction_handlers(),  # InitProducerId with a transactional id too (transaction_apis.py)
        }

    def handle(self, frame: bytes | bytearray, fast: bool = True) -> tuple[int, Result]:
        """(correlation id, result); ``fast=False``: the caller tried the produce fast path already."""
        try:
            api_key, version, correlation_id = peek_header(frame)
        except ProtocolError as e:
            raise CloseConnection(str(e)) from None
        if fast and api_key == 0 and FAST_PRODUCE_FIRST <= version <= FAST_PRODUCE_LAST:
            body = self.fast_produce.handle(frame, version)
            if body is not None:
                return correlation_id, body
        if api_key == ApiKey.API_VERSIONS and version > ADVERTISED[ApiKey.API_VERSIONS][1]:
            # A newer client: answer in v0 with the ranges we speak (the body of a v3+ request is flexible).
            return correlation_id, api_versions.encode_response(0, ErrorCode.UNSUPPORTED_VERSION, ADVERTISED)
        handler = self._handlers.get(api_key)
        if handler is None:
            raise CloseConnection(f"unknown api key {api_key} (version {version}, correlation id {correlation_id})")
        if not is_advertised(api_key, version):
            lo, hi = ADVERTISED[api_key]
            raise CloseConnection(f"unsupported version {version} of {ApiKey(api_key).name} (supported {lo}-{hi})")
        try:
            header, reader = read_request_header(frame)
            return correlation_id, handler(header, reader)
        except ProtocolError as e:
            raise CloseConnection(f"malformed {ApiKey(api_key).name} v{version} request: {e}") from None

    # ------------------------------------------------------------------ ApiVersions
    def handle_api_versions(self, header: RequestHeader, r: Reader) -> Result:
        return api_versions.encode_response(header.api_version, ErrorCode.NONE, ADVERTISED)

    # ------------------------------------------------------------------ Metadata
    def handle_metadata(self, header: RequestHeader, r: Reader) -> Result:
        version = header.api_version
        req = metadata.parse_request(r, version)
        cache_topics = self.metadata.topics
        missing = [] if req.topics is None else [t for t in req.topics if t not in cache_topics]
        if missing and self.config.auto_create_topics and req.allow_auto_topic_creation:
            return self._metadata_after_create(version, req, missing)
        return self._metadata_body(version, req.topics)

    async def _metadata_after_create(self, version: int, req: metadata.MetadataRequest,
                                     missing: list[str]) -> bytes:
        loop = asyncio.get_running_loop()
        for name in missing:
            try:
                await loop.run_in_executor(self.executor, self.registry.create_topic, name,
                                           self.config.num_partitions, None, self.config.default_replication_factor)
                log.info("auto-created topic %s with %d partition(s)", name, self.config.num_partitions)
            except Exception as e:  # exists already (a race), invalid name ...: the answer below says which
                log.debug("auto-create of %s: %s", name, e)
        return self._metadata_body(version, req.topics, created=set(missing))

    def _metadata_body(self, version: int, names: list[str] | None, created: set[str] | frozenset = frozenset()
                       ) -> bytes:
        live = self.metadata.brokers
        topics = self.metadata.topics
        brokers = [metadata.BrokerMetadata(b.id, b.host, b.port, b.datacenter or None)
                   for b in sorted(live.values(), key=lambda b: b.id)]
        out: list[metadata.TopicMetadata] = []
        for name in (sorted(topics) if names is None else names):
            info = topics.get(name)
            if info is None:
                code = ErrorCode.LEADER_NOT_AVAILABLE if name in created else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if name in created and _invalid_topic_name(name):
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                out.append(metadata.TopicMetadata(code, name, []))
                continue
            parts = []
            states = self.metadata.states
            for p in sorted(info.partitions):
                replicas = list(info.replicas.get(p, (info.partitions[p],))) if info.replicas else [info.partitions[p]]
                offline = [b for b in replicas if b not in live]
                entry = states.get((name, p))
                if entry is not None and entry[0].leader in live:
                    st = entry[0]
                    parts.append(metadata.PartitionMetadata(0, p, st.leader, replicas, list(st.isr), offline,
                                                            st.leader_epoch))
                else:
                    epoch = entry[0].leader_epoch if entry is not None else 0
                    isr = list(entry[0].isr) if entry is not None else []
                    parts.append(metadata.PartitionMetadata(ErrorCode.LEADER_NOT_AVAILABLE, p, -1, replicas, isr,
                                                            offline, epoch))
            out.append(metadata.TopicMetadata(0, name, parts))
        return metadata.encode_response(version, brokers, self.cluster_id, self.metadata.controller_id(), out)

    # ------------------------------------------------------------------ Produce
    def handle_produce(self, header: RequestHeader, r: Reader) -> Result:
        version = header.api_version
        req = produce.parse_request(r, version)
        served = is_served(ApiKey.PRODUCE, version)
        acks = req.acks
        allow = 0 if req.transactional_id is None else TRANSACTIONAL_MASK  # transactional batches need an id
        results: list[tuple[str, list[produce.PartitionProduceResult]]] = []
        to_flush: list[tuple[Any, int, produce.PartitionProduceResult]] = []
        failed = False
        replicas = self.replicas
        for topic, partitions in req.topics:
            tres = []
            for partition, records in partitions:
                res = produce.PartitionProduceResult(partition)
                tres.append(res)
                if not served:
                    res.error_code = ErrorCode.UNSUPPORTED_VERSION
                    res.error_message = "Produce v0-2 (message format v0/v1) is not supported; use v3+"
                elif acks not in (0, 1, -1):
                    res.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                else:
                    part, code = replicas.leader_partition(topic, partition)
                    if code:
                        res.error_code = code
                    elif not records:
                        res.error_code = ErrorCode.CORRUPT_MESSAGE
                        res.error_message = "empty record set"
                    elif acks == -1 and not part.enough_replicas():
                        res.error_code = ErrorCode.NOT_ENOUGH_REPLICAS
                        res.error_message = (f"the ISR {list(part.isr)} is smaller than min.insync.replicas "
                                             f"{part.min_isr}")
                    else:
                        end = self._append(part, topic, partition, records, res, allow)
                        if acks == -1 and end is not None:
                            to_flush.append((part, end, res))
                if res.error_code:
                    failed = True
            results.append((topic, tres))
        if acks == 0:
            if failed:
                raise CloseConnection("acks=0 produce failed: " + _describe_errors(results))
            return None
        if to_flush:
            return self._produce_after_flush(version, results, to_flush, req.timeout_ms)
        return produce.encode_response(version, results)

    def _append(self, part: Any, topic: str, partition: int, records: memoryview,
                res: produce.PartitionProduceResult, allow: int = 0) -> int | None:
        """Append and fill in `res`; returns the end offset (exclusive) on success."""
        lg = part.log
        try:
            info = self.replicas.append(part, records, allow)
            pb = self.request_metrics.produce_bytes
            pb[topic] = pb.get(topic, 0) + len(records)
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

    async def _produce_after_flush(self, version: int, results: list, to_flush: list, timeout_ms: int) -> bytes:
        """acks=-1: answer once the leader flushed and every ISR member has the batch (or say why not)."""
        outcomes = await asyncio.gather(*(self.replicas.acknowledge(part, end, timeout_ms, self.flusher)
                                          for part, end, _ in to_flush))
        for (_part, _end, res), (code, message) in zip(to_flush, outcomes, strict=True):
            if code:
                res.error_code = code
                res.error_message = message
        return produce.encode_response(version, results)

    # ------------------------------------------------------------------ Fetch
    def handle_fetch(self, header: RequestHeader, r: Reader) -> Result:
        version = header.api_version
        req = fetch.parse_request(r, version)
        results, total, errors = self._read_fetch(req)
        if errors or total >= req.min_bytes or req.max_wait_ms <= 0:
            return self._fetch_answer(version, results)
        keys = self._fetch_logs(req)
        if not keys:
            return self._fetch_answer(version, results)
        deadline = time.monotonic() + min(req.max_wait_ms, self.config.fetch_wait_max_ms) / 1000.0
        fut = self.purgatory.watch(keys)  # registered now, so no wake-up between this read and the wait is lost
        return self._delayed_fetch(version, req, keys, fut, deadline)

    async def _delayed_fetch(self, version: int, req: fetch.FetchRequest, keys: list, fut: asyncio.Future,
                             deadline: float) -> list:
        purgatory = self.purgatory
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
        fb = self.request_metrics.fetch_bytes
        for topic, parts in results:
            n = sum(len(rec) if isinstance(rec := res.records, bytes | bytearray) else rec.size for res in parts)
            if n:
                fb[topic] = fb.get(topic, 0) + n
        return fetch.encode_response(version, results)

    def _fetch_logs(self, req: fetch.FetchRequest) -> list:
        out = []
        for topic, parts in req.topics:
            for fp in parts:
                part, _code = self.replicas.leader_partition(topic, fp.partition)
                if part is not None:
                    out.append(part.log)
        return out

    def _read_fetch(self, req: fetch.FetchRequest) -> tuple[list, int, bool]:
        budget = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
        total = 0
        errors = False
        first = True
        replicas = self.replicas
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














def _invalid_topic_name(name: str) -> bool:
    try:
        from ferry.zk.topic_name import validate_topic_name

        validate_topic_name(name)
    except Exception:
        return True
    return False


def _describe_errors(results: list) -> str:
    errs = [f"{t}-{p.partition}: {ErrorCode(p.error_code).name}" for t, ps in results for p in ps if p.error_code]
    return ", ".join(errs[:10])


def _cluster_id(zk_connect: str) -> str:
    _, _, chroot = zk_connect.partition("/")
    return "ferry:/" + chroot if chroot else "ferry"
