"""OffsetForLeaderEpoch (key 23): where a leader's log ends for a given leader epoch (KIP-101, KIP-279).

A follower that has just learnt of a new leader asks for the end offset of its own latest epoch and
truncates there, so it never keeps (or loses) what the leader does not (or does) hold. The answer comes
from the leader's epoch cache; only the current leader answers (others: NOT_LEADER_OR_FOLLOWER), and an
asker with a different idea of the current epoch is fenced or told to refresh.
"""

from __future__ import annotations

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result
from ferry.wire.protocol import offset_for_leader_epoch as ofle
from ferry.wire.protocol.acl_types import AclOperation, ResourceType
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Reader


class ReplicationApis:
    """OffsetForLeaderEpoch: the inter-broker request a follower asks its new leader before it truncates."""

    def __init__(self, replicas: ReplicaManager, authorizer: Authorizer | None = None) -> None:
        self._replicas = replicas
        self._authz = authorizer if authorizer is not None else Authorizer()

    def handle_offset_for_leader_epoch(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = ofle.parse_request(r, version)
        out: list[tuple[str, list[ofle.EpochEndOffset]]] = []
        authz = self._authz
        # a follower (replica id >= 0) needs ClusterAction; a consumer validating its position, Describe on the topic
        follower_denied = (authz.enabled and req.replica_id >= 0
                           and not authz.authorize_cluster(request, AclOperation.CLUSTER_ACTION))
        for topic, parts in req.topics:
            results = []
            denied = follower_denied or (authz.enabled and req.replica_id < 0 and not authz.authorize(
                request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic))
            for p in parts:
                if denied:
                    results.append(ofle.EpochEndOffset(p.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                    continue
                part, code = self._replicas.leader_partition(topic, p.partition)
                if not code and p.current_leader_epoch >= 0 and p.current_leader_epoch != part.leader_epoch:
                    code = (ErrorCode.FENCED_LEADER_EPOCH if p.current_leader_epoch < part.leader_epoch
                            else ErrorCode.UNKNOWN_LEADER_EPOCH)
                if code:
                    results.append(ofle.EpochEndOffset(p.partition, code))
                    continue
                lg = part.log
                epoch, end = lg.leader_epoch_cache.end_offset_for(p.leader_epoch, lg.log_end_offset)
                results.append(ofle.EpochEndOffset(p.partition, ErrorCode.NONE, epoch, end))
            out.append((topic, results))
        return ofle.encode_response(version, out)
