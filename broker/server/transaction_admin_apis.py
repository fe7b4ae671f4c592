"""TransactionAdminApis: what operators ask about transactions and producers (KIP-664: kafka-transactions.sh,
AdminClient.listTransactions/describeTransactions/describeProducers), answered from the state the transaction
coordinator and the partition leaders keep anyway.

ListTransactions (66) lists the ids this broker coordinates (each broker its own: admin clients ask every one);
DescribeTransactions (65) answers for an id coordinated here (NOT_COORDINATOR elsewhere, TRANSACTIONAL_ID_NOT_FOUND
(105) for one never seen); DescribeProducers (61) reads a led partition's producer state (NOT_LEADER_OR_FOLLOWER
elsewhere). Authorization as Kafka's: Describe on each transactional id (ListTransactions hides the others), Read
on each topic.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result
from ferry.broker.server.transaction_coordinator import TransactionCoordinator
from ferry.broker.server.transaction_state import STATES, TxnMetadata, read_txn
from ferry.wire.protocol import describe_producers, describe_transactions, list_transactions
from ferry.wire.protocol.acl_types import AclOperation, ResourceType
from ferry.wire.protocol.describe_producers import ActiveProducer, PartitionProducers
from ferry.wire.protocol.describe_transactions import TransactionState
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Reader


class TransactionAdminApis:
    """ListTransactions, DescribeTransactions, DescribeProducers."""

    def __init__(self, coordinator: TransactionCoordinator | None, replicas: ReplicaManager,
                 executor: Executor | None, authorizer: Authorizer | None = None) -> None:
        self._authz = authorizer if authorizer is not None else Authorizer()
        self._coordinator = coordinator
        self._replicas = replicas
        self._executor = executor

    def handle_list_transactions(self, request: RequestContext, r: Reader) -> Result:
        req = list_transactions.parse_request(r, request.api_version)
        unknown = [s for s in req.state_filters if s not in STATES]
        coord = self._coordinator
        if coord is None or coord.loop is None:
            return list_transactions.encode_response(ErrorCode.COORDINATOR_NOT_AVAILABLE, unknown, [])
        states, pids = set(req.state_filters), set(req.producer_id_filters)
        txns = [(t, m.producer_id, m.state) for t, m in sorted(coord.txns.items())
                if (not states or m.state in states) and (not pids or m.producer_id in pids)]
        visible = set(self._authz.allowed_names(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                                [t for t, _, _ in txns]))
        return list_transactions.encode_response(ErrorCode.NONE, unknown, [t for t in txns if t[0] in visible])

    def handle_describe_transactions(self, request: RequestContext, r: Reader) -> Result:
        ids = describe_transactions.parse_request(r, request.api_version)
        return self._describe_transactions(request, ids)

    async def _describe_transactions(self, request: RequestContext, ids: list[str]) -> bytes:
        out = []
        for txn_id in ids:
            out.append(await self._describe_one(request, txn_id))
        return describe_transactions.encode_response(out)

    async def _describe_one(self, request: RequestContext, txn_id: str) -> TransactionState:
        authz = self._authz
        if authz.enabled and not authz.authorize(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            return TransactionState(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, txn_id)
        coord = self._coordinator
        if coord is None:
            return TransactionState(ErrorCode.COORDINATOR_NOT_AVAILABLE, txn_id)
        code = coord.validate(txn_id)
        if code:
            return TransactionState(code, txn_id)
        meta: TxnMetadata | None = coord.txns.get(txn_id)
        if meta is None:
            meta = await asyncio.get_running_loop().run_in_executor(self._executor, read_txn, coord.zk_client(), txn_id)
        if meta is None:
            return TransactionState(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, txn_id)
        topics: dict[str, list[int]] = {}
        for t, p in sorted(meta.partitions):
            topics.setdefault(t, []).append(p)
        return TransactionState(ErrorCode.NONE, txn_id, meta.state, meta.timeout_ms, meta.start_ms, meta.producer_id,
                                meta.producer_epoch, sorted(topics.items()))

    def handle_describe_producers(self, request: RequestContext, r: Reader) -> Result:
        topics = describe_producers.parse_request(r, request.api_version)
        authz = self._authz
        out = []
        for topic, parts in topics:
            denied = authz.enabled and not authz.authorize(request, AclOperation.READ, ResourceType.TOPIC, topic)
            out.append((topic, [self._producers(topic, p, denied) for p in parts]))
        return describe_producers.encode_response(out)

    def _producers(self, topic: str, partition: int, denied: bool) -> PartitionProducers:
        if denied:
            return PartitionProducers(partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Read on the topic is needed")
        lg, code = self._replicas.leader_log(topic, partition)
        if code or lg is None:
            return PartitionProducers(partition, code or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        state = lg.producer_state
        ongoing = dict(state.ongoing)
        return PartitionProducers(partition, producers=[
            ActiveProducer(pid, entry.epoch, entry.last_seq, entry.last_ms, -1, ongoing.get(pid, -1))
            for pid, entry in sorted(state.producers.items())])
