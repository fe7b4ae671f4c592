"""Authorizer: may this request's principal, from its host, do this operation on this resource? Kafka's
AclAuthorizer rules over the broker's copy of the ACLs (zk/acl_store.AclCache):

- a principal in ``super.users`` may do everything;
- a resource no ACL applies to is allowed only with ``allow.everyone.if.no.acl.found=true`` (default false);
- an applying Deny (its operation, or All) wins over any Allow;
- an Allow of the operation, of All, or of an operation implying it (Read/Write/Delete/Alter imply Describe,
  AlterConfigs implies DescribeConfigs) allows it; nothing else does.

Without ``authorizer.class.name`` the broker has no ACL cache and ``authorize`` answers True at once. Decisions are
memoised per (principal, host, operation, resource) until the ACLs change, so a produce costs one dict look-up.
Each denial is logged (rate-limited) with the principal, host, operation, resource and request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ferry.broker.server.rate_limited_log import RateLimitedLog
from ferry.broker.server.request_context import KafkaPrincipal, RequestContext, Session
from ferry.wire.acl_binding import AccessControlEntry, ResourcePattern
from ferry.wire.protocol.acl_types import (
    CLUSTER_NAME,
    IMPLIED_BY,
    WILDCARD,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from ferry.wire.protocol.api_keys import ApiKey
from ferry.zk.acl_store import AclCache

log = logging.getLogger(__name__)
MEMO_LIMIT = 100_000
_ALLOW, _DENY, _ALL = AclPermissionType.ALLOW, AclPermissionType.DENY, AclOperation.ALL


class Authorizer:
    """Kafka's authorization decision over the ACL cache; ``enabled`` is False without an authorizer configured."""

    def __init__(self, acls: AclCache | None = None, super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self._acls = acls
        self.enabled = acls is not None
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._memo: dict[tuple, bool] = {}
        self._generation = -1
        self._denials = RateLimitedLog(log, what="authorization denials")

    def authorize(self, request: RequestContext, op: AclOperation, rtype: ResourceType, name: str,
                  log_denial: bool = True) -> bool:
        """One decision; a denial is logged unless ``log_denial`` is False (a filter that just hides)."""
        if self._acls is None:
            return True
        return self.authorize_session(request.session, op, rtype, name, request.api_key if log_denial else -1)

    def authorize_session(self, session: Session, op: AclOperation, rtype: ResourceType, name: str,
                          logged_api_key: int = -1) -> bool:
        """authorize() for a connection's session (the Produce fast path has no RequestContext); a denial is
        logged naming the request ``logged_api_key`` unless it is -1."""
        acls = self._acls
        if acls is None:
            return True
        if acls.generation != self._generation or len(self._memo) > MEMO_LIMIT:
            self._memo = {}
            self._generation = acls.generation
        key = (session.principal, session.client_host, op, rtype, name)
        allowed = self._memo.get(key)
        if allowed is None:
            allowed = self._memo[key] = self._decide(session.principal, session.client_host, op, rtype, name)
        if not allowed and logged_api_key >= 0:
            self._denials.warning("Principal = %s is Denied Operation = %s from host = %s on resource = %s:%s "
                                  "for request = %s", session.principal, op.title, session.client_host, rtype.title,
                                  name, _api_name(logged_api_key))
        return allowed

    def authorize_cluster(self, request: RequestContext, op: AclOperation, log_denial: bool = True) -> bool:
        return self.authorize(request, op, ResourceType.CLUSTER, CLUSTER_NAME, log_denial)

    def allowed_names(self, request: RequestContext, op: AclOperation, rtype: ResourceType,
                      names: Iterable[str]) -> list[str]:
        """The names the principal may ``op``: what Metadata and ListGroups show (the others are hidden, unlogged)."""
        if self._acls is None:
            return list(names)
        return [n for n in names if self.authorize(request, op, rtype, n, log_denial=False)]

    def allowed_on_some(self, request: RequestContext, op: AclOperation, rtype: ResourceType) -> bool:
        """Whether some resource of ``rtype`` allows ``op`` to the principal (Kafka's authorizeByResourceType, KIP-679:
        Write on any topic lets a producer be idempotent): an applying Allow not covered by a Deny."""
        acls = self._acls
        if acls is None:
            return True
        principal, host = request.session.principal, request.session.client_host
        if str(principal) in self.super_users:
            return True
        patterns = acls.snapshot.patterns_of(rtype)
        if not patterns:
            return self.allow_if_no_acl
        allows: list[ResourcePattern] = []
        denies: list[ResourcePattern] = []
        for pattern, entries in patterns:
            for e in entries:
                if not _applies(e, principal, host):
                    continue
                if e.permission == _DENY and (e.operation == op or e.operation == _ALL):
                    denies.append(pattern)
                elif e.permission == _ALLOW and (e.operation == _ALL or e.operation in IMPLIED_BY.get(op, (op,))):
                    allows.append(pattern)
        return any(not any(_covers(d, a) for d in denies) for a in allows)

    def _decide(self, principal: KafkaPrincipal, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        if str(principal) in self.super_users:
            return True
        entries = self._acls.snapshot.matching(rtype, name) if self._acls is not None else []
        if not entries:
            return self.allow_if_no_acl
        implied = IMPLIED_BY.get(op, (op,))
        allowed = False
        for e in entries:
            if not _applies(e, principal, host):
                continue
            if e.permission == _DENY:
                if e.operation == op or e.operation == _ALL:
                    return False
            elif e.permission == _ALLOW and (e.operation == _ALL or e.operation in implied):
                allowed = True
        return allowed


def _applies(e: AccessControlEntry, principal: KafkaPrincipal, host: str) -> bool:
    """The entry names this principal (or every principal of its type: ``User:*``) and this host (or ``*``)."""
    p = e.principal
    if p != str(principal) and p != f"{principal.principal_type}:{WILDCARD}":
        return False
    return e.host == WILDCARD or e.host == host


def _covers(deny: ResourcePattern, allow: ResourcePattern) -> bool:
    """Every resource ``allow`` applies to is also under ``deny``."""
    if deny.pattern_type == PatternType.LITERAL:
        return deny.name == WILDCARD or (allow.pattern_type == PatternType.LITERAL and allow.name == deny.name)
    return allow.name.startswith(deny.name) and allow.name != WILDCARD


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)
