"""DescribeClientQuotas and AlterClientQuotas (KIP-546): admin clients read and change the client quotas stored in
ZooKeeper (zk/client_quotas.py); every broker applies a change through its watch (QuotaConfigCache), so a
change is live without a restart. Describing needs DescribeConfigs on the cluster, altering AlterConfigs, as
Kafka's authorizer asks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor

from kazoo.client import KazooClient

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result
from ferry.wire.protocol import alter_client_quotas, describe_client_quotas
from ferry.wire.protocol.acl_types import AclOperation
from ferry.wire.protocol.describe_client_quotas import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED, Entity
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Reader
from ferry.zk import client_quotas as store
from ferry.zk.client_quotas import CLIENT_ID, DEFAULT, QUOTA_KEYS, USER, QuotaEntity, QuotaStoreError


class QuotaRequestError(ValueError):
    """A filter or an entity the request cannot mean (answered INVALID_REQUEST with this message)."""


def to_quota_entity(entity: Entity) -> QuotaEntity:
    """The protocol's (type, name) pairs as a stored entity; QuotaRequestError when they name none."""
    names: dict[str, str] = {}
    for etype, name in entity:
        if etype not in (USER, CLIENT_ID):
            raise QuotaRequestError(f"unknown entity type {etype!r} (known: user, client-id)")
        if etype in names:
            raise QuotaRequestError(f"entity type {etype!r} given twice")
        if name == "":
            raise QuotaRequestError(f"an empty {etype} name (the default entity is a null name)")
        names[etype] = DEFAULT if name is None else name
    if not names:
        raise QuotaRequestError("an entity needs a user, a client-id or both")
    return QuotaEntity(names.get(USER), names.get(CLIENT_ID))


def _matches(entity: QuotaEntity, components: list[describe_client_quotas.Component], strict: bool) -> bool:
    have = dict(entity.components())
    for c in components:
        if c.entity_type not in have:
            return False
        name = have[c.entity_type]
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
        if c.match_type == MATCH_SPECIFIED and name is None:
            return False
    return not strict or len(have) == len(components)


def check_filter(components: list[describe_client_quotas.Component]) -> None:
    seen = set()
    for c in components:
        if c.entity_type not in (USER, CLIENT_ID):
            raise QuotaRequestError(f"unknown entity type {c.entity_type!r} (known: user, client-id)")
        if c.entity_type in seen:
            raise QuotaRequestError(f"entity type {c.entity_type!r} filtered twice")
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise QuotaRequestError(f"unknown match type {c.match_type}")
        if c.match_type == MATCH_EXACT and c.match is None:
            raise QuotaRequestError("an exact match needs a name (match the default with match type 1)")
        seen.add(c.entity_type)


class ClientQuotaApis:
    """DescribeClientQuotas / AlterClientQuotas over the quotas in ZooKeeper."""

    def __init__(self, client: Callable[[], KazooClient], executor: Executor | None,
                 authorizer: Authorizer | None = None) -> None:
        self._client = client
        self._executor = executor
        self._authz = authorizer if authorizer is not None else Authorizer()

    def handle_describe_client_quotas(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = describe_client_quotas.parse_request(r, version)
        if self._authz.enabled and not self._authz.authorize_cluster(request, AclOperation.DESCRIBE_CONFIGS):
            return describe_client_quotas.encode_response(version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                          "DescribeConfigs on the cluster is not allowed", None)
        try:
            check_filter(req.components)
        except QuotaRequestError as e:
            return describe_client_quotas.encode_response(version, ErrorCode.INVALID_REQUEST, str(e), None)
        return self._describe(version, req)

    async def _describe(self, version: int, req: describe_client_quotas.DescribeClientQuotasRequest) -> bytes:
        quotas = await asyncio.get_running_loop().run_in_executor(self._executor, lambda: store.read_all(
            self._client()))
        entries = [(e.components(), q) for e, q in sorted(quotas.items(), key=lambda kv: str(kv[0].path()))
                   if _matches(e, req.components, req.strict)]
        return describe_client_quotas.encode_response(version, ErrorCode.NONE, None, entries)

    def handle_alter_client_quotas(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        entries, validate_only = alter_client_quotas.parse_request(r, version)
        if self._authz.enabled and not self._authz.authorize_cluster(request, AclOperation.ALTER_CONFIGS):
            return alter_client_quotas.encode_response(version, [(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "AlterConfigs on the cluster is not allowed", e.entity)
                for e in entries])
        return self._alter(version, entries, validate_only)

    async def _alter(self, version: int, entries: list[alter_client_quotas.AlterEntry], validate_only: bool) -> bytes:
        loop = asyncio.get_running_loop()
        results: list[tuple[int, str | None, Entity]] = []
        for entry in entries:
            try:
                entity = to_quota_entity(entry.entity)
                set_, remove = _ops(entry.ops)
                if not validate_only:
                    await loop.run_in_executor(self._executor, store.alter, self._client(), entity, set_, remove)
                results.append((ErrorCode.NONE, None, entry.entity))
            except (QuotaRequestError, QuotaStoreError) as e:
                results.append((ErrorCode.INVALID_REQUEST, str(e), entry.entity))
        return alter_client_quotas.encode_response(version, results)


def _ops(ops: list[alter_client_quotas.QuotaOp]) -> tuple[dict[str, float], list[str]]:
    set_: dict[str, float] = {}
    remove: list[str] = []
    for op in ops:
        if op.key not in QUOTA_KEYS:
            raise QuotaRequestError(f"unknown quota key {op.key!r} (known: {', '.join(QUOTA_KEYS)})")
        if op.key in set_ or op.key in remove:
            raise QuotaRequestError(f"quota key {op.key!r} given twice")
        if op.remove:
            remove.append(op.key)
        else:
            store.check_quota(op.key, op.value)
            set_[op.key] = op.value
    return set_, remove
