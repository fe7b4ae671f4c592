"""The admin requests: CreateTopics (written to the registry, answered per topic with Kafka's codes)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ferry.wire.protocol import (
    create_topics,
)
from ferry.wire.protocol.errors import ErrorCode, error_code_of
from ferry.wire.protocol.header import RequestHeader
from ferry.wire.protocol.primitives import Reader

if TYPE_CHECKING:
    from ferry.broker.server.kafka_apis import Result

log = logging.getLogger("ferry.broker.server.kafka_apis")
CREATE_TOPIC_WAIT_S = 5.0  # how long CreateTopics waits for this broker's metadata to show the new topics


class AdminApis:
    """The admin requests: CreateTopics (written to the registry, answered per topic with Kafka's codes). (a part of KafkaApis)."""

    # ------------------------------------------------------------------ CreateTopics
    def handle_create_topics(self, header: RequestHeader, r: Reader) -> Result:
        req = create_topics.parse_request(r, header.api_version)
        return self._create_topics(header.api_version, req)

    async def _create_topics(self, version: int, req: create_topics.CreateTopicsRequest) -> bytes:
        from ferry.wire.log_config import LogConfig

        loop = asyncio.get_running_loop()
        results: list[tuple[str, int, str | None]] = []
        created: list[str] = []
        seen: set[str] = set()
        for t in req.topics:
            if t.name in seen:
                results.append((t.name, ErrorCode.INVALID_REQUEST, "topic listed twice in one request"))
                continue
            seen.add(t.name)
            n = self.config.num_partitions if t.num_partitions == -1 else t.num_partitions
            if t.assignments:
                results.append((t.name, ErrorCode.INVALID_REQUEST, "manual replica assignments are not supported"))
                continue
            if t.replication_factor not in (-1, 1):
                results.append((t.name, ErrorCode.INVALID_REPLICATION_FACTOR,
                                "replication factor must be 1 (ferry does not replicate)"))
                continue
            if n < 1:
                results.append((t.name, ErrorCode.INVALID_PARTITIONS, f"partition count {n} must be at least 1"))
                continue
            configs = {k: v for k, v in t.configs.items() if v is not None}
            try:
                LogConfig.from_topic_config(configs)
            except ValueError as e:
                results.append((t.name, ErrorCode.INVALID_CONFIG, str(e)))
                continue
            try:
                if req.validate_only:
                    if t.name in self.metadata.topics:
                        raise _topic_exists(t.name)
                else:
                    await loop.run_in_executor(self.executor, self.registry.create_topic, t.name, n, configs or None)
                    created.append(t.name)
                    log.info("created topic %s with %d partition(s)", t.name, n)
                results.append((t.name, ErrorCode.NONE, None))
            except Exception as e:
                code, message = _registry_error(e)
                if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                    log.exception("create_topic %s failed", t.name)
                results.append((t.name, code, message))
        # Answer once this broker's metadata shows the new topics, so the client's next request finds them.
        deadline = time.monotonic() + min(CREATE_TOPIC_WAIT_S, max(req.timeout_ms, 0) / 1000.0)
        while created and time.monotonic() < deadline:
            if all(name in self.metadata.topics for name in created):
                break
            await asyncio.sleep(0.02)
        return create_topics.encode_response(version, results)


class _TopicExists(Exception):
    pass


def _topic_exists(name: str) -> Exception:
    return _TopicExists(f"topic {name!r} already exists")


def _registry_error(e: Exception) -> tuple[int, str]:
    name = type(e).__name__
    code = {
        "TopicExistsError": ErrorCode.TOPIC_ALREADY_EXISTS,
        "_TopicExists": ErrorCode.TOPIC_ALREADY_EXISTS,
        "InvalidTopicError": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "InvalidPartitionsError": ErrorCode.INVALID_PARTITIONS,
        "InvalidConfigError": ErrorCode.INVALID_CONFIG,
        "NoBrokersError": ErrorCode.INVALID_REPLICATION_FACTOR,
    }.get(name, error_code_of(e))
    return code, str(e) or name
