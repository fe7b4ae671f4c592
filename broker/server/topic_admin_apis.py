"""DeleteTopics, CreatePartitions, DeleteRecords and DescribeLogDirs (a part of KafkaApis).

DeleteTopics removes the topic from the registry (its znode and partition states, one transaction) and the
groups' committed offsets of it; every broker holding a replica then deletes its logs (topic_deletion.py). The
answer waits (bounded by the request's timeout) until this broker's metadata no longer shows the topic, so the
client's next Metadata does not find it. CreatePartitions grows a topic with the registry's placement
(explicit replica assignments are refused: INVALID_REQUEST). DeleteRecords moves the leader's log start
(broker/log/log_start.py); the answer's low watermark is the new start. DescribeLogDirs lists this broker's one
data directory with the size of every partition in it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor

from ferry.broker.log.log_start import delete_records_before
from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.broker_config import BrokerConfig
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result
from ferry.wire.protocol import create_partitions, delete_records, delete_topics, describe_log_dirs
from ferry.wire.protocol.acl_types import AclOperation, ResourceType
from ferry.wire.protocol.errors import ErrorCode, error_code_of
from ferry.wire.protocol.primitives import Reader
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.errors import InvalidPartitionsError, InvalidTopicError, NoBrokersError, UnknownTopicError
from ferry.zk.group_offsets import delete_topic_offsets

log = logging.getLogger(__name__)
METADATA_WAIT_S = 5.0  # at most this long for this broker's metadata to show a change it made


class TopicAdminApis:
    """DeleteTopics / CreatePartitions / DeleteRecords / DescribeLogDirs: changes to existing topics."""

    def __init__(self, config: BrokerConfig, metadata_cache: MetadataCache, registry: ClusterRegistry,
                 replicas: ReplicaManager, executor: Executor | None, authorizer: Authorizer | None = None) -> None:
        self._authz = authorizer if authorizer is not None else Authorizer()
        self._config = config
        self._metadata = metadata_cache
        self._registry = registry
        self._replicas = replicas
        self._executor = executor

    # ------------------------------------------------------------------ DeleteTopics
    def handle_delete_topics(self, request: RequestContext, r: Reader) -> Result:
        req = delete_topics.parse_request(r, request.api_version)
        denied = self._denied(request, AclOperation.DELETE, req.topics)
        return self._delete_topics(request.api_version, req, denied)

    def _denied(self, request: RequestContext, op: AclOperation, topics: list[str]) -> set[str]:
        """The topics the principal may not ``op`` (answered TOPIC_AUTHORIZATION_FAILED)."""
        authz = self._authz
        if not authz.enabled:
            return set()
        return {t for t in dict.fromkeys(topics) if not authz.authorize(request, op, ResourceType.TOPIC, t)}

    async def _delete_topics(self, version: int, req: delete_topics.DeleteTopicsRequest, denied: set[str]) -> bytes:
        loop = asyncio.get_running_loop()
        results: list[tuple[str, int]] = []
        deleted: list[str] = []
        for name in dict.fromkeys(req.topics):
            if name in denied:
                results.append((name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                await loop.run_in_executor(self._executor, self._registry.delete_topic, name)
            except UnknownTopicError:
                results.append((name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            except InvalidTopicError:
                results.append((name, ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            except Exception as e:
                log.warning("deleting topic %s failed: %s", name, e or type(e).__name__)
                results.append((name, error_code_of(e)))
                continue
            log.info("deleted topic %s", name)
            deleted.append(name)
            results.append((name, ErrorCode.NONE))
            try:  # as Kafka: the groups' offsets of a deleted topic go with it
                await loop.run_in_executor(self._executor, delete_topic_offsets, self._registry.client, name)
            except Exception as e:
                log.warning("removing the committed offsets of deleted topic %s failed: %s", name, e)
        await self._await_metadata(lambda: not any(t in self._metadata.topics for t in deleted), req.timeout_ms)
        return delete_topics.encode_response(version, results)

    async def _await_metadata(self, done: Callable[[], bool], timeout_ms: int) -> None:
        deadline = time.monotonic() + min(METADATA_WAIT_S, max(timeout_ms, 0) / 1000.0)
        while not done() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    # ------------------------------------------------------------------ CreatePartitions
    def handle_create_partitions(self, request: RequestContext, r: Reader) -> Result:
        req = create_partitions.parse_request(r, request.api_version)
        denied = self._denied(request, AclOperation.ALTER, [t.name for t in req.topics])
        return self._create_partitions(request.api_version, req, denied)

    async def _create_partitions(self, version: int, req: create_partitions.CreatePartitionsRequest,
                                 denied: set[str]) -> bytes:
        loop = asyncio.get_running_loop()
        results: list[tuple[str, int, str | None]] = []
        grown: dict[str, int] = {}
        for t in req.topics:
            if t.name in denied:
                results.append((t.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Alter on the topic is needed"))
                continue
            info = self._metadata.topics.get(t.name)
            if t.assignments is not None:
                results.append((t.name, ErrorCode.INVALID_REQUEST, "explicit replica assignments are not supported"
                                " by ferry's CreatePartitions; leave them out to have the new partitions placed"))
                continue
            if info is None:
                results.append((t.name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {t.name!r} does not exist"))
                continue
            if t.count <= info.partition_count:
                results.append((t.name, ErrorCode.INVALID_PARTITIONS, f"topic {t.name!r} has {info.partition_count}"
                                f" partitions; the new total ({t.count}) must be larger"))
                continue
            if req.validate_only:
                results.append((t.name, ErrorCode.NONE, None))
                continue
            try:
                await loop.run_in_executor(self._executor, self._registry.add_partitions, t.name, t.count)
            except UnknownTopicError:
                results.append((t.name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {t.name!r} does not exist"))
                continue
            except InvalidPartitionsError as e:
                results.append((t.name, ErrorCode.INVALID_PARTITIONS, str(e)))
                continue
            except NoBrokersError as e:
                results.append((t.name, ErrorCode.INVALID_REPLICATION_FACTOR, str(e)))
                continue
            except Exception as e:
                code = error_code_of(e)
                log.warning("adding partitions to %s failed: %s", t.name, e or type(e).__name__)
                results.append((t.name, code, str(e) or type(e).__name__))
                continue
            log.info("topic %s: %d -> %d partitions", t.name, info.partition_count, t.count)
            grown[t.name] = t.count
            results.append((t.name, ErrorCode.NONE, None))
        await self._await_metadata(lambda: all(
            name in self._metadata.topics and self._metadata.topics[name].partition_count >= n
            for name, n in grown.items()), req.timeout_ms)
        return create_partitions.encode_response(version, results)

    # ------------------------------------------------------------------ DeleteRecords
    def handle_delete_records(self, request: RequestContext, r: Reader) -> Result:
        req = delete_records.parse_request(r, request.api_version)
        denied = self._denied(request, AclOperation.DELETE, [t for t, _ in req.topics])
        return self._delete_records(request.api_version, req, denied)

    async def _delete_records(self, version: int, req: delete_records.DeleteRecordsRequest, denied: set[str]) -> bytes:
        loop = asyncio.get_running_loop()
        out = []
        for topic, parts in req.topics:
            rows = []
            for partition, offset in parts:
                if topic in denied:
                    rows.append((partition, -1, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                    continue
                lg, code = self._replicas.leader_log(topic, partition)
                if code:
                    rows.append((partition, -1, code))
                    continue
                target = lg.high_watermark if offset == delete_records.HIGH_WATERMARK else offset
                if target < 0 or target > lg.high_watermark:
                    rows.append((partition, -1, ErrorCode.OFFSET_OUT_OF_RANGE))
                    continue
                try:
                    low = await loop.run_in_executor(self._executor, delete_records_before, lg, target)
                except Exception as e:
                    code = error_code_of(e)
                    if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                        log.exception("DeleteRecords on %s-%d failed", topic, partition)
                    rows.append((partition, -1, code))
                    continue
                rows.append((partition, low, ErrorCode.NONE))
            out.append((topic, rows))
        return delete_records.encode_response(version, out)

    # ------------------------------------------------------------------ DescribeLogDirs
    def handle_describe_log_dirs(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        wanted = describe_log_dirs.parse_request(r, version)
        if self._authz.enabled and not self._authz.authorize_cluster(request, AclOperation.DESCRIBE):
            return describe_log_dirs.encode_response(version, [])  # as Kafka: v0-1 have no error field, answer none
        manager = self._replicas.log_manager
        select = None if wanted is None else {(t, p) for t, parts in wanted for p in parts}
        by_topic: dict[str, list[tuple[int, int, int]]] = {}
        for (topic, partition), lg in sorted(manager.all_logs().items()):
            if select is not None and (topic, partition) not in select:
                continue
            try:
                size = lg.size_in_bytes
            except Exception:
                continue  # closed or offline meanwhile
            by_topic.setdefault(topic, []).append((partition, size, 0))
        offline = bool(getattr(manager, "offline", False))
        result = describe_log_dirs.LogDirResult(ErrorCode.KAFKA_STORAGE_ERROR if offline else ErrorCode.NONE,
                                                str(self._config.data_dir.resolve()),
                                                [] if offline else sorted(by_topic.items()))
        return describe_log_dirs.encode_response(version, [result])
