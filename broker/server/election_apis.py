"""ElectionApis: ElectLeaders (key 43) for admin clients (kafka-leader-election, AdminClient.elect_leaders).

The broker does not elect: it hands the partitions to the controller through the same znode `ferry topics
elect-leaders` writes (zk/preferred_election.py) and answers once each partition is led by its preferred replica
or the request's time is up, with Kafka's codes: ELECTION_NOT_NEEDED (84) when the preferred replica leads
already, PREFERRED_LEADER_NOT_AVAILABLE (80) when it is not in the ISR or not registered, REQUEST_TIMED_OUT when
the controller did not act in time. Unclean elections are a topic setting in ferry
(``unclean.leader.election.enable``): an unclean request is answered INVALID_REQUEST per partition.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result
from ferry.wire.protocol import elect_leaders
from ferry.wire.protocol.acl_types import AclOperation
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Reader
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.preferred_election import request_preferred_election

MAX_WAIT_S = 60.0  # a request's timeout_ms is bounded by this
POLL_S = 0.05

Outcome = tuple[int, str | None]


class ElectionApis:
    """ElectLeaders: Alter on the cluster, as Kafka authorizes it."""

    def __init__(self, metadata_cache: MetadataCache, registry: ClusterRegistry, executor: Executor | None,
                 authorizer: Authorizer | None = None) -> None:
        self._authz = authorizer if authorizer is not None else Authorizer()
        self._metadata = metadata_cache
        self._registry = registry
        self._executor = executor

    def handle_elect_leaders(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = elect_leaders.parse_request(r, version)
        wanted = self._partitions(req)
        if self._authz.enabled and not self._authz.authorize_cluster(request, AclOperation.ALTER):
            return _answer(version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, wanted,
                           dict.fromkeys(wanted, (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Alter on the cluster")))
        if req.election_type != elect_leaders.PREFERRED:
            return _answer(version, ErrorCode.NONE, wanted, dict.fromkeys(wanted, (
                ErrorCode.INVALID_REQUEST, "unclean elections are a topic setting in ferry "
                "(unclean.leader.election.enable)")))
        return self._elect(version, wanted, min(max(req.timeout_ms, 0) / 1000.0, MAX_WAIT_S))

    def _partitions(self, req: elect_leaders.ElectLeadersRequest) -> list[tuple[str, int]]:
        if req.partitions is None:
            return [(t, p) for t, info in sorted(self._metadata.topics.items()) for p in sorted(info.replicas)]
        return [(t, p) for t, ps in req.partitions for p in ps]

    def _outcome(self, topic: str, partition: int) -> Outcome | None:
        """The answer a partition has already (None: an election is wanted)."""
        info = self._metadata.topics.get(topic)
        if info is None or partition not in info.replicas:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist"
        preferred = info.replicas[partition][0]
        state = self._metadata.state(topic, partition)
        if state is not None and state.leader == preferred:
            return ErrorCode.ELECTION_NOT_NEEDED, None
        if state is None or preferred not in state.isr or preferred not in self._metadata.brokers:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, (
                f"preferred replica {preferred} of {topic}-{partition} is not in the ISR or not registered")
        return None

    async def _elect(self, version: int, wanted: list[tuple[str, int]], wait_s: float) -> bytes:
        outcomes: dict[tuple[str, int], Outcome] = {}
        todo = []
        for tp in dict.fromkeys(wanted):
            found = self._outcome(*tp)
            if found is None:
                todo.append(tp)
            else:
                outcomes[tp] = found
        deadline = time.monotonic() + wait_s
        loop = asyncio.get_running_loop()
        client = self._registry.client
        while todo and not await loop.run_in_executor(self._executor, request_preferred_election, client, todo):
            if time.monotonic() >= deadline:  # the controller takes one request at a time
                return _answer(version, ErrorCode.NONE, wanted, {**outcomes, **dict.fromkeys(todo, (
                    ErrorCode.REQUEST_TIMED_OUT, "another preferred election is pending in the controller"))})
            await asyncio.sleep(POLL_S)
        while todo:
            for tp in list(todo):
                found = self._outcome(*tp)
                if found is not None:  # led by the preferred replica now: elected (or it fell out of the ISR)
                    outcomes[tp] = (ErrorCode.NONE, None) if found[0] == ErrorCode.ELECTION_NOT_NEEDED else found
                    todo.remove(tp)
            if todo and time.monotonic() >= deadline:
                outcomes.update(dict.fromkeys(todo, (ErrorCode.REQUEST_TIMED_OUT,
                                                     "the controller has not moved the leader yet")))
                break
            if todo:
                await asyncio.sleep(POLL_S)
        return _answer(version, ErrorCode.NONE, wanted, outcomes)


def _answer(version: int, error_code: int, wanted: list[tuple[str, int]],
            outcomes: dict[tuple[str, int], Outcome]) -> bytes:
    by_topic: dict[str, list[tuple[int, int, str | None]]] = {}
    for t, p in dict.fromkeys(wanted):
        code, message = outcomes.get((t, p), (ErrorCode.NONE, None))
        by_topic.setdefault(t, []).append((p, code, message))
    return elect_leaders.encode_response(version, error_code, list(by_topic.items()))
