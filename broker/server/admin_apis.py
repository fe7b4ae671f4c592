"""AdminApis: CreateTopics (written to the registry, answered per topic with Kafka's codes), and the topics a
Metadata request creates when auto.create.topics.enable is on.

Replication factor -1 means the broker's ``default.replication.factor``, partitions -1 its
``num.partitions``; more replicas than live brokers is INVALID_REPLICATION_FACTOR (38). Manual replica
assignments are accepted as Kafka accepts them (partitions 0..n-1, equally many distinct live brokers each,
with num_partitions and replication_factor -1), else INVALID_REPLICA_ASSIGNMENT (39).
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.broker_config import BrokerConfig
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.partition_limit import partition_limit_error
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result
from ferry.wire.log_config import LogConfig
from ferry.wire.protocol import (
    create_topics,
)
from ferry.wire.protocol.acl_types import AclOperation, ResourceType
from ferry.wire.protocol.errors import ErrorCode, error_code_of
from ferry.wire.protocol.primitives import Reader
from ferry.zk.assignment import assign_replicas, check_assignment
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    NoBrokersError,
    TopicExistsError,
)

log = logging.getLogger(__name__)
CREATE_TOPIC_WAIT_S = 5.0  # how long CreateTopics waits for this broker's metadata to show the new topics


class AdminApis:
    """CreateTopics (key 19): written to the registry, answered per topic with Kafka's codes."""

    def __init__(self, config: BrokerConfig, metadata_cache: MetadataCache, registry: ClusterRegistry,
                 executor: Executor | None, authorizer: Authorizer | None = None) -> None:
        self._authz = authorizer if authorizer is not None else Authorizer()
        self._config = config
        self._metadata = metadata_cache
        self._registry = registry
        self._executor = executor

    # ------------------------------------------------------------------ CreateTopics
    def handle_create_topics(self, request: RequestContext, r: Reader) -> Result:
        req = create_topics.parse_request(r, request.api_version)
        allowed = set(self.creatable(request, [t.name for t in req.topics]))
        return self._create_topics(request.api_version, req, allowed)

    def creatable(self, request: RequestContext, names: list[str]) -> list[str]:
        """The topics the principal may create: Create on the cluster, or else on each topic."""
        authz = self._authz
        if not authz.enabled or authz.authorize_cluster(request, AclOperation.CREATE):
            return names
        return [n for n in names if authz.authorize(request, AclOperation.CREATE, ResourceType.TOPIC, n)]

    async def _create_topics(self, version: int, req: create_topics.CreateTopicsRequest, allowed: set[str]) -> bytes:
        loop = asyncio.get_running_loop()
        results: list[tuple[str, int, str | None]] = []
        created: list[str] = []
        seen: set[str] = set()
        for t in req.topics:
            if t.name in seen:
                results.append((t.name, ErrorCode.INVALID_REQUEST, "topic listed twice in one request"))
                continue
            seen.add(t.name)
            if t.name not in allowed:
                results.append((t.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Create on the cluster or the topic "
                                "is needed"))
                continue
            if t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    results.append((t.name, ErrorCode.INVALID_REQUEST, "give either replica assignments or "
                                    "num_partitions and replication_factor (-1 with assignments), not both"))
                    continue
                parts = [p for p, _ in t.assignments]
                if len(set(parts)) != len(parts):
                    results.append((t.name, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "a partition is assigned twice"))
                    continue
                n, rf = len(parts), -1
            else:
                n = self._config.num_partitions if t.num_partitions == -1 else t.num_partitions
                rf = self._config.default_replication_factor if t.replication_factor == -1 else t.replication_factor
                if rf < 1:
                    results.append((t.name, ErrorCode.INVALID_REPLICATION_FACTOR,
                                    f"replication factor {rf} must be at least 1 (or -1: the broker's "
                                    f"default.replication.factor, {self._config.default_replication_factor})"))
                    continue
            if n < 1:
                results.append((t.name, ErrorCode.INVALID_PARTITIONS, f"partition count {n} must be at least 1"))
                continue
            too_many = partition_limit_error(self._metadata.topics, list(self._metadata.brokers),
                                             self._config.max_broker_partitions, n, rf, t.assignments)
            if too_many:
                results.append((t.name, ErrorCode.POLICY_VIOLATION, too_many))
                continue
            configs = {k: v for k, v in t.configs.items() if v is not None}
            try:
                LogConfig.from_topic_config(configs)
            except ValueError as e:
                results.append((t.name, ErrorCode.INVALID_CONFIG, str(e)))
                continue
            try:
                if req.validate_only:
                    self._validate_placement(t, n, rf)
                elif t.assignments:
                    await loop.run_in_executor(self._executor, self._registry.create_topic_with_assignment, t.name,
                                               dict(t.assignments), configs or None)
                else:
                    await loop.run_in_executor(self._executor, self._registry.create_topic, t.name, n,
                                               configs or None, rf)
                if not req.validate_only:
                    created.append(t.name)
                    log.info("created topic %s with %d partition(s), replication factor %s", t.name, n,
                             len(t.assignments[0][1]) if t.assignments else rf)
                results.append((t.name, ErrorCode.NONE, None))
            except Exception as e:
                code, message = _registry_error(e)
                if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                    log.exception("create_topic %s failed", t.name)
                results.append((t.name, code, message))
        # Answer once this broker's metadata shows the new topics, so the client's next request finds them.
        deadline = time.monotonic() + min(CREATE_TOPIC_WAIT_S, max(req.timeout_ms, 0) / 1000.0)
        while created and time.monotonic() < deadline:
            if all(name in self._metadata.topics for name in created):
                break
            await asyncio.sleep(0.02)
        return create_topics.encode_response(version, results)

    async def auto_create(self, names: list[str]) -> None:
        """Create topics a Metadata request asked for (auto.create.topics.enable) with the broker's defaults;
        a failure (it exists already: a race; an invalid name) is for the Metadata answer to show."""
        loop = asyncio.get_running_loop()
        n, rf = self._config.num_partitions, self._config.default_replication_factor
        for name in names:
            try:
                await loop.run_in_executor(self._executor, self._registry.create_topic, name, n, None, rf)
                log.info("auto-created topic %s with %d partition(s)", name, n)
            except Exception as e:
                log.debug("auto-create of %s: %s", name, e)

    def _validate_placement(self, t: create_topics.CreatableTopic, n: int, rf: int) -> None:
        """validate_only: what create_topic would refuse, judged from this broker's metadata."""
        if t.name in self._metadata.topics:
            raise TopicExistsError(f"topic {t.name!r} already exists")
        live = list(self._metadata.brokers)
        if t.assignments:
            check_assignment(t.name, dict(t.assignments), live)
        else:
            assign_replicas(t.name, live, 0, n, rf)


_REGISTRY_ERRORS: dict[type[Exception], int] = {
    TopicExistsError: ErrorCode.TOPIC_ALREADY_EXISTS,
    InvalidTopicError: ErrorCode.INVALID_TOPIC_EXCEPTION,
    InvalidPartitionsError: ErrorCode.INVALID_PARTITIONS,
    InvalidConfigError: ErrorCode.INVALID_CONFIG,
    NoBrokersError: ErrorCode.INVALID_REPLICATION_FACTOR,
    InvalidReplicationFactorError: ErrorCode.INVALID_REPLICATION_FACTOR,
    InvalidReplicaAssignmentError: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
}


def _registry_error(e: Exception) -> tuple[int, str]:
    code = _REGISTRY_ERRORS.get(type(e), error_code_of(e))
    return code, str(e) or type(e).__name__
