"""DescribeAcls, CreateAcls and DeleteAcls (keys 29-31): the ACLs in ZooKeeper managed through the admin clients,
authorized as Kafka authorizes them (Describe on the cluster to read them, Alter on the cluster to change them).

Without an authorizer configured they answer SECURITY_DISABLED (54), as Kafka does. Reads go to ZooKeeper (not
this broker's cache), so a binding just created is described at once; every broker's cache follows through the
change notifications the writes leave (zk/acl_store.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor

from kazoo.client import KazooClient

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result
from ferry.wire.acl_binding import AclBinding, AclBindingFilter, check_binding
from ferry.wire.protocol import create_acls, delete_acls, describe_acls
from ferry.wire.protocol.acl_types import AclOperation
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Reader
from ferry.zk.acl_store import AclSnapshot, AclStoreError, add_acls, read_all, remove_acls

log = logging.getLogger(__name__)
NO_AUTHORIZER = "no authorizer is configured on this broker (authorizer.class.name)"


class AclApis:
    """The three ACL admin requests, over the ZooKeeper ACL store."""

    def __init__(self, authorizer: Authorizer, client: Callable[[], KazooClient], executor: Executor | None) -> None:
        self._authorizer = authorizer
        self._client = client
        self._executor = executor

    # ------------------------------------------------------------------ DescribeAcls
    def handle_describe_acls(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        f = describe_acls.parse_request(r, version)
        if not self._authorizer.enabled:
            return describe_acls.encode_response(version, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER, [])
        if not self._authorizer.authorize_cluster(request, AclOperation.DESCRIBE):
            return describe_acls.encode_response(version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                 "Describe on the cluster is needed to read ACLs", [])
        invalid = f.invalid()
        if invalid:
            return describe_acls.encode_response(version, ErrorCode.INVALID_REQUEST, invalid, [])
        return self._describe(version, f)

    async def _describe(self, version: int, f: AclBindingFilter) -> bytes:
        try:
            acls = await self._run(read_all)
        except Exception as e:
            return describe_acls.encode_response(version, ErrorCode.UNKNOWN_SERVER_ERROR,
                                                 f"reading ACLs from ZooKeeper: {e or type(e).__name__}", [])
        return describe_acls.encode_response(version, ErrorCode.NONE, None, AclSnapshot(acls).bindings(f))

    # ------------------------------------------------------------------ CreateAcls
    def handle_create_acls(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        bindings = create_acls.parse_request(r, version)
        if not self._authorizer.enabled:
            return create_acls.encode_response(version, [(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)] * len(bindings))
        if not self._authorizer.authorize_cluster(request, AclOperation.ALTER):
            return create_acls.encode_response(version, [(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                          "Alter on the cluster is needed to create ACLs")]
                                               * len(bindings))
        return self._create(version, bindings, request)

    async def _create(self, version: int, bindings: list[AclBinding], request: RequestContext) -> bytes:
        results: list[tuple[int, str | None]] = []
        for b in bindings:
            why = check_binding(b)
            if why:
                results.append((ErrorCode.INVALID_REQUEST, why))
                continue
            try:
                await self._run(add_acls, [b])
            except AclStoreError as e:
                results.append((ErrorCode.INVALID_REQUEST, str(e)))
                continue
            except Exception as e:
                log.warning("creating ACL %s %s failed: %s", b.pattern, b.entry, e or type(e).__name__)
                results.append((ErrorCode.UNKNOWN_SERVER_ERROR, str(e) or type(e).__name__))
                continue
            log.info("ACL added by %s: %s: %s", request.principal, b.pattern, b.entry)
            results.append((ErrorCode.NONE, None))
        return create_acls.encode_response(version, results)

    # ------------------------------------------------------------------ DeleteAcls
    def handle_delete_acls(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        filters = delete_acls.parse_request(r, version)
        if not self._authorizer.enabled:
            return delete_acls.encode_response(version, [(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER, [])] * len(filters))
        if not self._authorizer.authorize_cluster(request, AclOperation.ALTER):
            return delete_acls.encode_response(version, [(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                          "Alter on the cluster is needed to delete ACLs", [])]
                                               * len(filters))
        return self._delete(version, filters, request)

    async def _delete(self, version: int, filters: list[AclBindingFilter], request: RequestContext) -> bytes:
        valid = [f for f in filters if f.invalid() is None]
        try:
            deleted = iter(await self._run(remove_acls, valid))
        except Exception as e:
            message = f"deleting ACLs in ZooKeeper: {e or type(e).__name__}"
            return delete_acls.encode_response(version, [(ErrorCode.UNKNOWN_SERVER_ERROR, message, [])] * len(filters))
        results: list[delete_acls.FilterResult] = []
        for f in filters:
            invalid = f.invalid()
            if invalid:
                results.append((ErrorCode.INVALID_REQUEST, invalid, []))
                continue
            gone = next(deleted)
            for b in gone:
                log.info("ACL removed by %s: %s: %s", request.principal, b.pattern, b.entry)
            results.append((ErrorCode.NONE, None, gone))
        return delete_acls.encode_response(version, results)

    async def _run(self, fn: Callable, *args: object) -> object:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, self._client(), *args)
