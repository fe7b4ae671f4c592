"""The group requests: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups. Decoding and encoding only; the rules are
GroupCoordinator's (docs/groups.md).

A request that must wait (JoinGroup until the join phase ends, SyncGroup until the leader's assignments, a
commit until ZooKeeper has it) returns a coroutine; the member's future is shielded so that a connection
closing under it never cancels the group's own bookkeeping.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.group_coordinator import GroupCoordinator
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result, encode_after
from ferry.broker.server.transaction_apis import TransactionApis, coordinator_answer
from ferry.wire.protocol import (
    consumer_group_describe,
    consumer_group_heartbeat,
    delete_groups,
    describe_groups,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    sync_group,
)
from ferry.wire.protocol.acl_types import AclOperation, ResourceType
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Reader

log = logging.getLogger(__name__)


class GroupApis:
    """The group coordinator's requests, and FindCoordinator (transactional ids: TransactionApis answers)."""

    def __init__(self, group_coordinator: GroupCoordinator | None, transactions: TransactionApis,
                 authorizer: Authorizer | None = None) -> None:
        self._group_coordinator = group_coordinator
        self._transactions = transactions
        self._authz = authorizer if authorizer is not None else Authorizer()

    def _group_denied(self, request: RequestContext, group_id: str, op: AclOperation = AclOperation.READ) -> bool:
        """Whether the principal may not ``op`` the group (then the answer is GROUP_AUTHORIZATION_FAILED)."""
        authz = self._authz
        return authz.enabled and not authz.authorize(request, op, ResourceType.GROUP, group_id)

    # ------------------------------------------------------------------ FindCoordinator
    def handle_find_coordinator(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = find_coordinator.parse_request(r, version)
        if req.key_type == find_coordinator.KEY_TYPE_TRANSACTION:
            if self._authz.enabled and not self._authz.authorize(request, AclOperation.DESCRIBE,
                                                                 ResourceType.TRANSACTIONAL_ID, req.key):
                return find_coordinator.encode_response(version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            return self._transactions.find_transaction_coordinator(version, req.key, request.session.listener_name)
        if req.key_type != find_coordinator.KEY_TYPE_GROUP:
            return find_coordinator.encode_response(version, ErrorCode.INVALID_REQUEST,
                                                    error_message=f"unknown coordinator key type {req.key_type}")
        if not req.key:
            return find_coordinator.encode_response(version, ErrorCode.INVALID_GROUP_ID,
                                                    error_message="the group id is empty")
        if self._group_denied(request, req.key, AclOperation.DESCRIBE):
            return find_coordinator.encode_response(version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        coordinator = self._group_coordinator
        return coordinator_answer(version, coordinator.coordinator(req.key) if coordinator is not None else None,
                                  request.session.listener_name,
                                  "no live broker is registered")

    # ------------------------------------------------------------------ JoinGroup / SyncGroup
    def handle_join_group(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = join_group.parse_request(r, version)
        if self._group_denied(request, req.group_id):
            return join_group.encode_response(version, join_group.JoinGroupResponse(
                ErrorCode.GROUP_AUTHORIZATION_FAILED, member_id=req.member_id))
        coordinator = self._coordinator()
        if coordinator is None:
            return join_group.encode_response(version, join_group.JoinGroupResponse(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=req.member_id))
        if coordinator.consumer_groups.has_members(req.group_id):  # KIP-848 group: no classic member (docs/groups.md)
            return join_group.encode_response(version, join_group.JoinGroupResponse(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
        result = coordinator.join(req, version, request.client_id or "", "/" + request.session.client_host)  # as Kafka shows it
        if isinstance(result, asyncio.Future):
            return _answer_later(result, lambda res: join_group.encode_response(version, res))
        return join_group.encode_response(version, result)

    def handle_sync_group(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = sync_group.parse_request(r, version)
        if self._group_denied(request, req.group_id):
            return sync_group.encode_response(version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        coordinator = self._coordinator()
        if coordinator is None:
            return sync_group.encode_response(version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        result = coordinator.sync(req.group_id, req.generation_id, req.member_id, req.group_instance_id,
                                  req.assignments)
        if isinstance(result, asyncio.Future):
            return _answer_later(result, lambda res: sync_group.encode_response(version, res[0], res[1]))
        return sync_group.encode_response(version, result[0], result[1])

    # ------------------------------------------------------------------ Heartbeat / LeaveGroup
    def handle_heartbeat(self, request: RequestContext, r: Reader) -> Result:
        req = heartbeat.parse_request(r, request.api_version)
        if self._group_denied(request, req.group_id):
            return heartbeat.encode_response(request.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        coordinator = self._coordinator()
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE if coordinator is None else \
            coordinator.heartbeat(req.group_id, req.generation_id, req.member_id, req.group_instance_id)
        return heartbeat.encode_response(request.api_version, code)

    def handle_leave_group(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = leave_group.parse_request(r, version)
        if self._group_denied(request, req.group_id):
            return leave_group.encode_response(version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        coordinator = self._coordinator()
        top, members = (ErrorCode.COORDINATOR_NOT_AVAILABLE, []) if coordinator is None else \
            coordinator.leave(req.group_id, req.members)
        if version < 3 and not top and members:
            top = members[0][2]  # v0-2: one member, its error is the answer's
        return leave_group.encode_response(version, top, members)

    # ------------------------------------------------------------------ OffsetCommit / OffsetFetch
    def handle_offset_commit(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = offset_commit.parse_request(r, version)
        coordinator = self._coordinator()
        if coordinator is not None and not coordinator.validate_group(req.group_id):
            loading = coordinator.consumer_persistence.ensure_loaded(req.group_id)  # a KIP-848 member's commit
            if loading is not None:
                return _after_load(loading, lambda: self._offset_commit(request, version, req, coordinator))
        return self._offset_commit(request, version, req, coordinator)

    def _offset_commit(self, request: RequestContext, version: int, req: offset_commit.OffsetCommitRequest,
                       coordinator: GroupCoordinator | None) -> Result:
        if coordinator is None or self._group_denied(request, req.group_id):
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE if coordinator is None else ErrorCode.GROUP_AUTHORIZATION_FAILED
            return offset_commit.encode_response(version, [(t, [(p.partition, code) for p in ps])
                                                           for t, ps in req.topics])
        denied: list[tuple[str, list[tuple[int, int]]]] = []
        if self._authz.enabled:  # and Read on each topic committed
            authz, code = self._authz, ErrorCode.TOPIC_AUTHORIZATION_FAILED
            keep = [(t, ps) for t, ps in req.topics if authz.authorize(request, AclOperation.READ, ResourceType.TOPIC, t)]
            denied = [(t, [(p.partition, code) for p in ps]) for t, ps in req.topics if (t, ps) not in keep]
            if denied:
                if not keep:
                    return offset_commit.encode_response(version, denied)
                req = dataclasses.replace(req, topics=keep)
        protocol_type = None  # the classic group's own
        if coordinator.consumer_groups.has_members(req.group_id):
            code = coordinator.consumer_groups.commit_error(req.group_id, req.member_id, req.generation_id)
            if code:
                return offset_commit.encode_response(version, [(t, [(p.partition, code) for p in ps])
                                                               for t, ps in req.topics] + denied)
            req = dataclasses.replace(req, generation_id=-1, member_id="", group_instance_id=None)  # checked here
            protocol_type = "consumer"
        result = coordinator.commit(req, protocol_type)
        if isinstance(result, list):
            return offset_commit.encode_response(version, result + denied)
        return encode_after(result, lambda res: offset_commit.encode_response(version, res + denied))

    def handle_offset_fetch(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = offset_fetch.parse_request(r, version)
        if self._group_denied(request, req.group_id, AclOperation.DESCRIBE):
            return _offset_fetch_error(version, req, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        coordinator = self._coordinator()
        if coordinator is None:
            return _offset_fetch_error(version, req, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        # v0 is Kafka 0.8.1's: the group's offsets in ZooKeeper (the paper's groups, the standalone mirror's)
        result = coordinator.fetch_zookeeper_group(req.group_id, req.topics or []) if version == 0 else \
            coordinator.fetch(req.group_id, req.topics)
        if self._authz.enabled:  # and Describe on each topic: the others are left out (all asked) or refused
            def visible(res: tuple[int, list]) -> bytes:
                authz, listed = self._authz, req.topics is not None
                out = []
                for t, ps in res[1]:
                    if authz.authorize(request, AclOperation.DESCRIBE, ResourceType.TOPIC, t, log_denial=listed):
                        out.append((t, ps))
                    elif listed:
                        out.append((t, [offset_fetch.FetchedOffset(p.partition, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                        for p in ps]))
                return _offset_fetch_body(version, res[0], out)

            return visible(result) if isinstance(result, tuple) else encode_after(result, visible)
        if isinstance(result, tuple):
            return _offset_fetch_body(version, *result)
        return encode_after(result, lambda res: _offset_fetch_body(version, *res))

    # ------------------------------------------------------------------ ListGroups / DescribeGroups / DeleteGroups
    def handle_consumer_group_heartbeat(self, request: RequestContext, r: Reader) -> Result:
        """KIP-848 (consumer_group_coordinator.py); a group with classic members is not a consumer group."""
        req = consumer_group_heartbeat.parse_request(r, request.api_version)
        if self._group_denied(request, req.group_id):
            return consumer_group_heartbeat.encode_error_response(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
        coordinator = self._coordinator()
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE if coordinator is None else coordinator.validate_group(req.group_id)
        if code:
            return consumer_group_heartbeat.encode_error_response(code, None)
        classic = coordinator.groups.get(req.group_id)
        if classic is not None and classic.has_members:
            return consumer_group_heartbeat.encode_error_response(
                ErrorCode.GROUP_ID_NOT_FOUND, f"group {req.group_id} is a classic group with members, not a "
                                              "consumer group")
        interval = coordinator.consumer_groups.settings.heartbeat_interval_ms
        answer = coordinator.consumer_persistence.heartbeat(req, request.client_id or "",
                                                            "/" + request.session.client_host)

        def encode(a: tuple) -> bytes:
            return consumer_group_heartbeat.encode_response(a[0], a[1], a[2], a[3], interval, a[4])

        return encode(answer) if isinstance(answer, tuple) else encode_after(answer, encode)

    def handle_consumer_group_describe(self, request: RequestContext, r: Reader) -> Result:
        """KIP-848's describe; a group that is not a consumer-protocol group here: GROUP_ID_NOT_FOUND."""
        group_ids = consumer_group_describe.parse_request(r, request.api_version)
        coordinator = self._coordinator()
        if coordinator is not None:  # groups not yet loaded here (a restarted coordinator) are read first
            loading = [w for gid in group_ids if not coordinator.validate_group(gid)
                       for w in [coordinator.consumer_persistence.ensure_loaded(gid)] if w is not None]
            if loading:
                return _after_load(asyncio.gather(*loading), lambda: self._consumer_group_describe(request, group_ids))
        return self._consumer_group_describe(request, group_ids)

    def _consumer_group_describe(self, request: RequestContext, group_ids: list[str]) -> Result:
        coordinator = self._coordinator()
        out = []
        for gid in group_ids:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE if coordinator is None else coordinator.validate_group(gid)
            if not code and self._group_denied(request, gid, AclOperation.DESCRIBE):
                code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            described = None if code else coordinator.consumer_groups.describe(gid)
            if described is None:
                code = code or ErrorCode.GROUP_ID_NOT_FOUND
                described = consumer_group_describe.ConsumerGroupDescription(
                    code, gid, f"group {gid} is not a consumer group" if code == ErrorCode.GROUP_ID_NOT_FOUND else None)
            out.append(described)
        return consumer_group_describe.encode_response(out)

    def handle_list_groups(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        states, types = list_groups.parse_filters(r, version)
        coordinator = self._coordinator()
        if coordinator is None:
            return list_groups.encode_response(version, ErrorCode.COORDINATOR_NOT_AVAILABLE, [])
        authz = self._authz
        listing = _with_consumer_groups(coordinator)

        def encode(code: int, groups: list[tuple[str, str, str]]) -> bytes:
            kip848 = frozenset(g[0] for g in coordinator.consumer_groups.listed())
            return list_groups.encode_response(version, code, groups, states, types, kip848)

        if not authz.enabled or authz.authorize_cluster(request, AclOperation.DESCRIBE, log_denial=False):
            return encode_after(listing, lambda res: encode(*res))

        def visible(res: tuple[int, list[tuple[str, str, str]]]) -> bytes:  # without Describe on the cluster: filtered
            names = [g[0] for g in res[1]]
            allowed = set(authz.allowed_names(request, AclOperation.DESCRIBE, ResourceType.GROUP, names))
            return encode(res[0], [g for g in res[1] if g[0] in allowed])

        return encode_after(listing, visible)

    def handle_describe_groups(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = describe_groups.parse_request(r, version)
        coordinator = self._coordinator()
        if coordinator is None:
            return describe_groups.encode_response(version, [describe_groups.DescribedGroup(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, g) for g in req.groups])
        denied = {g for g in req.groups if self._group_denied(request, g, AclOperation.DESCRIBE)}
        if not denied:
            return encode_after(coordinator.describe_groups(req.groups),
                                lambda res: describe_groups.encode_response(version, res))
        refused = {g: describe_groups.DescribedGroup(ErrorCode.GROUP_AUTHORIZATION_FAILED, g) for g in denied}
        allowed = [g for g in req.groups if g not in denied]
        if not allowed:
            return describe_groups.encode_response(version, [refused[g] for g in req.groups])

        def merged(res: list[describe_groups.DescribedGroup]) -> bytes:
            found = iter(res)
            return describe_groups.encode_response(version, [refused[g] if g in refused else next(found)
                                                             for g in req.groups])

        return encode_after(coordinator.describe_groups(allowed), merged)

    def handle_delete_groups(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        names = delete_groups.parse_request(r, version)
        coordinator = self._coordinator()
        if coordinator is None:
            return delete_groups.encode_response(version, [(g, ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in names])
        refused = [(g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in names
                   if self._group_denied(request, g, AclOperation.DELETE)]
        allowed = [g for g in names if (g, ErrorCode.GROUP_AUTHORIZATION_FAILED) not in refused]
        if not allowed:
            return delete_groups.encode_response(version, refused)
        return encode_after(coordinator.delete_groups(allowed),
                            lambda res: delete_groups.encode_response(version, list(res) + refused))

    def handle_offset_delete(self, request: RequestContext, r: Reader) -> Result:
        """OffsetDelete (KIP-496): Delete on the group, and Read on each topic (as Kafka authorizes it)."""
        version = request.api_version
        req = offset_delete.parse_request(r, version)
        coordinator = self._coordinator()
        if coordinator is None:
            return offset_delete.encode_response(version, ErrorCode.COORDINATOR_NOT_AVAILABLE, [])
        if self._group_denied(request, req.group_id, AclOperation.DELETE):
            return offset_delete.encode_response(version, ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
        authz = self._authz
        readable = set(authz.allowed_names(request, AclOperation.READ, ResourceType.TOPIC, [t for t, _ in req.topics])
                       ) if authz.enabled else {t for t, _ in req.topics}
        refused = [(t, [(p, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in ps]) for t, ps in req.topics
                   if t not in readable]
        allowed = [(t, ps) for t, ps in req.topics if t in readable]
        return encode_after(coordinator.delete_offsets(req.group_id, allowed),
                            lambda res: offset_delete.encode_response(version, res[0], list(res[1]) + refused
                                                                      if res[0] == ErrorCode.NONE else []))

    def _coordinator(self) -> GroupCoordinator | None:
        return self._group_coordinator


async def _with_consumer_groups(coordinator: GroupCoordinator) -> tuple[int, list[tuple[str, str, str]]]:
    """The classic listing with the KIP-848 groups in it (theirs is the live state; stored offsets say Empty)."""
    code, groups = await coordinator.list_groups()
    live = {g[0]: g for g in coordinator.consumer_groups.listed()}
    return code, sorted([g for g in groups if g[0] not in live] + list(live.values()))


async def _answer_later(fut: asyncio.Future, encode: Callable[[Any], bytes]) -> bytes:
    """Wait for the group's answer; shielded: the connection's task may be cancelled, the future must not."""
    return encode(await asyncio.shield(fut))



def _offset_fetch_body(version: int, code: int, topics: list) -> bytes:
    if version < 2 and code:  # no top-level error before v2: every partition carries it
        topics = [(t, [offset_fetch.FetchedOffset(p.partition, error_code=code) for p in ps]) for t, ps in topics]
    return offset_fetch.encode_response(version, topics, code)


def _offset_fetch_error(version: int, req: offset_fetch.OffsetFetchRequest, code: int) -> bytes:
    topics = [(t, [offset_fetch.FetchedOffset(p, error_code=code) for p in ps]) for t, ps in req.topics or []]
    return _offset_fetch_body(version, code, topics)


async def _after_load(loading: Awaitable[None], answer: Callable[[], Result]) -> bytes | list | None:
    """``answer()`` once a consumer group's stored state is loaded (or could not be: then as if it had none)."""
    try:
        await loading
    except Exception as e:
        log.warning("loading a consumer group's state failed: %s", e or type(e).__name__)
    result = answer()
    return await result if inspect.isawaitable(result) else result
