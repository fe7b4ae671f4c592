"""DescribeConfigs, IncrementalAlterConfigs and AlterConfigs.

Topics: the config lives in the registry (the topic's znode); a change is validated as ``ferry topics create
--config`` validates (``LogConfig.from_topic_config``: a bad value is INVALID_CONFIG naming the setting) and
written conditionally on the znode's version; every broker applies it to its logs through its topic watch.
Brokers: DescribeConfigs lists this broker's settings (read-only); altering them is refused with
INVALID_REQUEST and a message saying how they change (properties file / --override, then a restart), since
ferry has no dynamic broker configs. Broker loggers (resource type 8) are not supported (INVALID_REQUEST).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.broker_config import BrokerConfig
from ferry.broker.server.config_entries import broker_entries, topic_entries
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result
from ferry.wire.log_config import LogConfig
from ferry.wire.protocol import alter_configs, describe_configs, incremental_alter_configs
from ferry.wire.protocol.acl_types import AclOperation, ResourceType
from ferry.wire.protocol.describe_configs import RESOURCE_BROKER, RESOURCE_TOPIC, ConfigResult
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.incremental_alter_configs import OP_APPEND, OP_DELETE, OP_SET
from ferry.wire.protocol.primitives import Reader
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.errors import InvalidConfigError, UnknownTopicError
from ferry.zk.topic_config import alter_topic_config

log = logging.getLogger(__name__)

AlterResult = tuple[int, str | None, int, str]  # (error code, message, resource type, resource name)
BROKER_SETTINGS_ARE_STATIC = ("ferry brokers have no dynamic configs: set it in the broker's properties file (or "
                              "--override KEY=VALUE) and restart the broker")


class ConfigApis:
    """DescribeConfigs / IncrementalAlterConfigs / AlterConfigs of topics (and describing this broker's)."""

    def __init__(self, config: BrokerConfig, registry: ClusterRegistry, executor: Executor | None,
                 authorizer: Authorizer | None = None) -> None:
        self._authz = authorizer if authorizer is not None else Authorizer()
        self._config = config
        self._registry = registry
        self._executor = executor

    # ------------------------------------------------------------------ DescribeConfigs
    def handle_describe_configs(self, request: RequestContext, r: Reader) -> Result:
        req = describe_configs.parse_request(r, request.api_version)
        denied = self._denied(request, AclOperation.DESCRIBE_CONFIGS, [(x.resource_type, x.name) for x in req.resources])
        return self._describe_configs(request.api_version, req, denied)

    def _denied(self, request: RequestContext, op: AclOperation, resources: list[tuple[int, str]]
                ) -> dict[tuple[int, str], int]:
        """(resource type, name) -> the authorization error of each the principal may not ``op``: a topic's
        (TOPIC_AUTHORIZATION_FAILED), a broker's (on the cluster: CLUSTER_AUTHORIZATION_FAILED)."""
        authz = self._authz
        out: dict[tuple[int, str], int] = {}
        if not authz.enabled:
            return out
        for rtype, name in resources:
            if rtype == RESOURCE_TOPIC and not authz.authorize(request, op, ResourceType.TOPIC, name):
                out[(rtype, name)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif rtype == RESOURCE_BROKER and not authz.authorize_cluster(request, op):
                out[(rtype, name)] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return out

    async def _describe_configs(self, version: int, req: describe_configs.DescribeConfigsRequest,
                                denied: dict[tuple[int, str], int]) -> bytes:
        loop = asyncio.get_running_loop()
        synonyms = req.include_synonyms and version >= 1
        results = []
        for res in req.resources:
            code = denied.get((res.resource_type, res.name))
            if code:
                results.append(ConfigResult(code, f"{AclOperation.DESCRIBE_CONFIGS.title} is not allowed",
                                            res.resource_type, res.name))
                continue
            if res.resource_type == RESOURCE_TOPIC:
                try:  # from ZooKeeper, not this broker's watch: an AlterConfigs just answered shows at once
                    info = await loop.run_in_executor(self._executor, self._registry.topic, res.name)
                except Exception as e:
                    results.append(ConfigResult(ErrorCode.UNKNOWN_SERVER_ERROR, f"reading the topic from ZooKeeper: "
                                                f"{e or type(e).__name__}", res.resource_type, res.name))
                    continue
                if info is None:
                    results.append(ConfigResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                f"topic {res.name!r} does not exist", res.resource_type, res.name))
                    continue
                entries = topic_entries(info.config, self._config.log, synonyms)
            elif res.resource_type == RESOURCE_BROKER:
                if res.name not in ("", str(self._config.broker_id)):
                    results.append(ConfigResult(ErrorCode.INVALID_REQUEST, f"this is broker {self._config.broker_id}"
                                                f", not {res.name}: ask that broker", res.resource_type, res.name))
                    continue
                entries = broker_entries(self._config, synonyms)
            else:
                results.append(_unsupported(res.resource_type, res.name))
                continue
            if res.keys is not None:
                entries = [e for e in entries if e.name in set(res.keys)]
            results.append(ConfigResult(ErrorCode.NONE, None, res.resource_type, res.name, entries))
        return describe_configs.encode_response(version, results)

    # ------------------------------------------------------------------ IncrementalAlterConfigs / AlterConfigs
    def handle_incremental_alter_configs(self, request: RequestContext, r: Reader) -> Result:
        req = incremental_alter_configs.parse_request(r, request.api_version)
        changes = []
        for res in req.resources:
            changes.append((res.resource_type, res.name, _incremental(res.configs)))
        denied = self._denied(request, AclOperation.ALTER_CONFIGS, [(t, n) for t, n, _ in changes])
        return self._alter_configs(request.api_version, changes, req.validate_only, denied)

    def handle_alter_configs(self, request: RequestContext, r: Reader) -> Result:
        req = alter_configs.parse_request(r, request.api_version)
        changes = []
        for res in req.resources:
            given = {name: value for name, value in res.configs if value is not None}
            changes.append((res.resource_type, res.name, lambda _old, given=given: dict(given)))
        denied = self._denied(request, AclOperation.ALTER_CONFIGS, [(t, n) for t, n, _ in changes])
        return self._alter_configs(request.api_version, changes, req.validate_only, denied)

    async def _alter_configs(self, version: int, changes: list[tuple[int, str, Callable[[dict], dict]]],
                             validate_only: bool, denied: dict[tuple[int, str], int]) -> bytes:
        loop = asyncio.get_running_loop()
        results: list[AlterResult] = []
        for rtype, name, change in changes:
            code = denied.get((rtype, name))
            if code:
                results.append((code, f"{AclOperation.ALTER_CONFIGS.title} is not allowed", rtype, name))
                continue
            if rtype == RESOURCE_BROKER:
                results.append((ErrorCode.INVALID_REQUEST, BROKER_SETTINGS_ARE_STATIC, rtype, name))
                continue
            if rtype != RESOURCE_TOPIC:
                res = _unsupported(rtype, name)
                results.append((res.error_code, res.error_message, rtype, name))
                continue
            try:
                new = await loop.run_in_executor(self._executor, alter_topic_config, self._registry.client, name,
                                                 _validated(change), not validate_only)
            except UnknownTopicError:
                results.append((ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist", rtype, name))
                continue
            except (ValueError, InvalidConfigError) as e:
                results.append((ErrorCode.INVALID_CONFIG, str(e), rtype, name))
                continue
            except Exception as e:
                log.warning("altering the config of %s failed: %s", name, e or type(e).__name__)
                results.append((ErrorCode.UNKNOWN_SERVER_ERROR, str(e) or type(e).__name__, rtype, name))
                continue
            if not validate_only:
                log.info("topic %s: config is now %s", name, new)
            results.append((ErrorCode.NONE, None, rtype, name))
        return alter_configs.encode_response(version, results)


LIST_SETTINGS = {"cleanup.policy": "delete"}  # list-valued topic settings and Kafka's default for APPEND/SUBTRACT


def _incremental(configs: list[incremental_alter_configs.AlterableConfig]) -> Callable[[dict], dict]:
    """IncrementalAlterConfigs' operations as a change of the current config (ValueError refuses it)."""

    def change(old: dict[str, str]) -> dict[str, str]:
        new = dict(old)
        for c in configs:
            if c.op == OP_SET:
                if c.value is None:
                    raise ValueError(f"{c.name}: SET needs a value")
                new[c.name] = c.value
            elif c.op == OP_DELETE:
                new.pop(c.name, None)
            elif c.name in LIST_SETTINGS:  # APPEND / SUBTRACT on a list (Kafka: from the topic's value or the default)
                current = [p for p in new.get(c.name, LIST_SETTINGS[c.name]).split(",") if p.strip()]
                items = [p.strip() for p in (c.value or "").split(",") if p.strip()]
                if c.op == OP_APPEND:
                    current += [p for p in items if p not in current]
                else:
                    current = [p for p in current if p.strip() not in items]
                new[c.name] = ",".join(current)
            else:  # APPEND / SUBTRACT: for list-valued settings only
                raise ValueError(f"{c.name}: operation {c.op} (APPEND/SUBTRACT) applies to list-valued settings "
                                 f"({', '.join(LIST_SETTINGS)}); use SET or DELETE")
        return new

    return change


def _validated(change: Callable[[dict], dict]) -> Callable[[dict], dict]:
    def checked(old: dict[str, str]) -> dict[str, str]:
        new = change(old)
        LogConfig.from_topic_config(new)  # ValueError naming the setting: as `ferry topics create --config`
        return new

    return checked


def _unsupported(rtype: int, name: str) -> ConfigResult:
    return ConfigResult(ErrorCode.INVALID_REQUEST, f"config resource type {rtype} is not supported by ferry "
                        "(topics: 2, brokers: 4)", rtype, name)
