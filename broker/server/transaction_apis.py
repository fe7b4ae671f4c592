"""The transaction requests: InitProducerId (idempotent producers too), AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit, and FindCoordinator for transactional ids.
Decoding and encoding; the rules are TransactionCoordinator's (docs/transactions.md).

TxnOffsetCommit goes to the group's coordinator like any offset commit; the offsets are kept as the
transaction's pending offsets in ZooKeeper (transaction_state.py), written only while the transaction is the
producer's open one and names the group, and become the group's committed offsets when it commits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.group_coordinator import GroupCoordinator
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.producer_id_manager import ProducerIdManager
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result, encode_after
from ferry.broker.server.transaction_coordinator import TransactionCoordinator
from ferry.broker.server.transaction_state import ONGOING, read_txn, write_pending_offsets
from ferry.wire.protocol import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    end_txn,
    find_coordinator,
    init_producer_id,
    txn_offset_commit,
    write_txn_markers,
)
from ferry.wire.protocol.acl_types import AclOperation, ResourceType
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Reader
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.znodes import BrokerInfo

log = logging.getLogger(__name__)

PENDING_WRITE_ATTEMPTS = 5


class TransactionApis:
    """The transaction coordinator's requests, and producer ids for idempotent producers."""

    def __init__(self, transaction_coordinator: TransactionCoordinator | None,
                 group_coordinator: GroupCoordinator | None, producer_ids: ProducerIdManager,
                 metadata_cache: MetadataCache, registry: ClusterRegistry, executor: Executor | None,
                 authorizer: Authorizer | None = None) -> None:
        self._authz = authorizer if authorizer is not None else Authorizer()
        self._transaction_coordinator = transaction_coordinator
        self._group_coordinator = group_coordinator
        self._producer_ids = producer_ids
        self._metadata = metadata_cache
        self._registry = registry
        self._executor = executor

    # ------------------------------------------------------------------ FindCoordinator (key type 1)
    def find_transaction_coordinator(self, version: int, txn_id: str, listener: str = "PLAINTEXT") -> bytes:
        tc = self._transaction_coordinator
        if not txn_id:
            return find_coordinator.encode_response(version, ErrorCode.INVALID_REQUEST,
                                                    error_message="the transactional id is empty")
        return coordinator_answer(version, tc.coordinator(txn_id) if tc is not None else None, listener,
                                  "no transaction coordinator is available")

    # ------------------------------------------------------------------ InitProducerId
    def handle_init_producer_id(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = init_producer_id.parse_request(r, version)
        if req.transactional_id is None:
            if self._authz.enabled and not self._may_be_idempotent(request):
                return init_producer_id.encode_response(version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1, -1)
            return self._init_producer_id(version)  # idempotent only
        if self._txn_denied(request, req.transactional_id):
            return init_producer_id.encode_response(version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
        tc = self._transaction_coordinator
        if tc is None:
            return init_producer_id.encode_response(version, ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
        return encode_after(tc.init_producer_id(req.transactional_id, req.transaction_timeout_ms),
                      lambda res: init_producer_id.encode_response(version, *res))

    def _may_be_idempotent(self, request: RequestContext) -> bool:
        """IdempotentWrite on the cluster, or Write on some topic (KIP-679: what an idempotent producer needs)."""
        authz = self._authz
        return (authz.authorize_cluster(request, AclOperation.IDEMPOTENT_WRITE, log_denial=False)
                or authz.allowed_on_some(request, AclOperation.WRITE, ResourceType.TOPIC)
                or authz.authorize_cluster(request, AclOperation.IDEMPOTENT_WRITE))  # logs the denial

    def _txn_denied(self, request: RequestContext, txn_id: str) -> bool:
        """Whether the principal may not Write the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
        authz = self._authz
        return authz.enabled and not authz.authorize(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)

    def _topic_denied(self, request: RequestContext, topic: str, op: AclOperation) -> bool:
        authz = self._authz
        return authz.enabled and not authz.authorize(request, op, ResourceType.TOPIC, topic)

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn
    def handle_add_partitions_to_txn(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = add_partitions_to_txn.parse_request(r, version)
        tps = [(t, p) for t, ps in req.topics for p in ps]
        tc = self._transaction_coordinator

        def encode(codes: dict) -> bytes:
            return add_partitions_to_txn.encode_response(version, [(t, [(p, codes[(t, p)]) for p in ps])
                                                                   for t, ps in req.topics])

        if tc is None:
            return encode(dict.fromkeys(tps, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        if self._txn_denied(request, req.transactional_id):
            return encode(dict.fromkeys(tps, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        denied = {t for t, _ in req.topics if self._topic_denied(request, t, AclOperation.WRITE)}
        if denied:  # as Kafka: the topics refused, the others not attempted
            return encode({(t, p): ErrorCode.TOPIC_AUTHORIZATION_FAILED if t in denied else
                           ErrorCode.OPERATION_NOT_ATTEMPTED for t, p in tps})
        return encode_after(tc.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch, tps, version),
                      encode)

    def handle_add_offsets_to_txn(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = add_offsets_to_txn.parse_request(r, version)
        if self._txn_denied(request, req.transactional_id):
            return add_offsets_to_txn.encode_response(version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if self._authz.enabled and not self._authz.authorize(request, AclOperation.READ, ResourceType.GROUP,
                                                             req.group_id):
            return add_offsets_to_txn.encode_response(version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        return self._error_code_answer(version, lambda tc: tc.add_offsets(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id, version))

    # ------------------------------------------------------------------ EndTxn / WriteTxnMarkers
    def handle_end_txn(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = end_txn.parse_request(r, version)
        if self._txn_denied(request, req.transactional_id):
            return end_txn.encode_response(version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return self._error_code_answer(version, lambda tc: tc.end_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed, version))

    def _error_code_answer(self, version: int, decide: Callable[[TransactionCoordinator], Awaitable[int]]) -> Result:
        """AddOffsetsToTxn's and EndTxn's answer (the same layout: an error code): the coordinator's decision,
        COORDINATOR_NOT_AVAILABLE on a broker without one."""
        tc = self._transaction_coordinator
        if tc is None:
            return end_txn.encode_response(version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return encode_after(decide(tc), lambda code: end_txn.encode_response(version, code))

    def handle_write_txn_markers(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        markers = write_txn_markers.parse_request(r, version)
        tc = self._transaction_coordinator
        if self._authz.enabled and not self._authz.authorize_cluster(request, AclOperation.CLUSTER_ACTION):
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            return write_txn_markers.encode_response(version, [
                (m.producer_id, [(t, [(p, code) for p in ps]) for t, ps in m.topics]) for m in markers])
        return self._write_markers(version, markers, tc)

    async def _write_markers(self, version: int, markers: list, tc: TransactionCoordinator | None) -> bytes:
        out = []
        for m in markers:
            tps = [(t, p) for t, ps in m.topics for p in ps]
            if tc is None:
                codes = dict.fromkeys(tps, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            else:
                codes = await tc.markers.write_local(m.producer_id, m.producer_epoch, m.committed, tps,
                                                     m.coordinator_epoch)
            out.append((m.producer_id, [(t, [(p, codes[(t, p)]) for p in ps]) for t, ps in m.topics]))
        return write_txn_markers.encode_response(version, out)

    # ------------------------------------------------------------------ TxnOffsetCommit (group side)
    def handle_txn_offset_commit(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = txn_offset_commit.parse_request(r, version)
        refused = 0
        denied_topics: set[str] = set()
        if self._txn_denied(request, req.transactional_id):
            refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif self._authz.enabled and not self._authz.authorize(request, AclOperation.READ, ResourceType.GROUP,
                                                               req.group_id):
            refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            denied_topics = {t for t, _ in req.topics if self._topic_denied(request, t, AclOperation.READ)}
        if refused or denied_topics:
            return txn_offset_commit.encode_response(version, [
                (t, [(p.partition, refused or (ErrorCode.TOPIC_AUTHORIZATION_FAILED if t in denied_topics else
                                               ErrorCode.OPERATION_NOT_ATTEMPTED)) for p in ps])
                for t, ps in req.topics])
        return self._txn_offset_commit(version, req)

    async def _txn_offset_commit(self, version: int, req: txn_offset_commit.TxnOffsetCommitRequest) -> bytes:
        gc = self._group_coordinator
        code = gc.validate_group(req.group_id) if gc is not None else ErrorCode.COORDINATOR_NOT_AVAILABLE
        topics = self._metadata.topics
        limit = gc.settings.max_metadata_bytes if gc is not None else 4096
        codes: dict[tuple[str, int], int] = {}
        offsets: dict[tuple[str, int], tuple[int, int, str]] = {}
        for topic, parts in req.topics:
            info = topics.get(topic)
            for p in parts:
                tp = (topic, p.partition)
                if code:
                    codes[tp] = code
                elif info is None or p.partition not in info.partitions:
                    codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif p.metadata is not None and len(p.metadata.encode()) > limit:
                    codes[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                else:
                    offsets[tp] = (p.offset, p.leader_epoch, p.metadata or "")
        if offsets:
            result = await self._write_pending(req, offsets)
            codes.update(dict.fromkeys(offsets, result))
        return txn_offset_commit.encode_response(
            version, [(t, [(p.partition, codes[(t, p.partition)]) for p in ps]) for t, ps in req.topics])

    async def _write_pending(self, req: txn_offset_commit.TxnOffsetCommitRequest,
                             offsets: dict[tuple[str, int], tuple[int, int, str]]) -> int:
        loop = asyncio.get_running_loop()
        client = self._registry.client
        code = ErrorCode.CONCURRENT_TRANSACTIONS
        try:
            for _ in range(PENDING_WRITE_ATTEMPTS):
                meta = await loop.run_in_executor(self._executor, read_txn, client, req.transactional_id)
                if meta is None or meta.producer_id != req.producer_id:
                    return ErrorCode.INVALID_PRODUCER_ID_MAPPING
                if meta.producer_epoch != req.producer_epoch:
                    return ErrorCode.INVALID_PRODUCER_EPOCH
                if meta.state != ONGOING or req.group_id not in meta.groups:
                    return ErrorCode.INVALID_TXN_STATE  # AddOffsetsToTxn first
                if await loop.run_in_executor(self._executor, write_pending_offsets, client, meta, req.group_id,
                                              offsets):
                    return ErrorCode.NONE
        except Exception as e:
            log.warning("TxnOffsetCommit of %s for group %s failed: %s", req.transactional_id, req.group_id,
                        str(e) or type(e).__name__)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return code


    async def _init_producer_id(self, version: int) -> bytes:
        try:
            pid = await self._producer_ids.next_id()
        except Exception as e:
            log.error("cannot allocate a producer id: %s", e)
            return init_producer_id.encode_response(version, ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
        return init_producer_id.encode_response(version, ErrorCode.NONE, pid, 0)


def coordinator_answer(version: int, node: BrokerInfo | None, listener: str, unavailable: str) -> bytes:
    """FindCoordinator's answer naming ``node`` at its address on ``listener`` (the one the client came in
    on), or COORDINATOR_NOT_AVAILABLE saying ``unavailable``."""
    address = node.endpoint(listener) if node is not None else None
    if node is not None and address is None:
        unavailable = f"the coordinator (broker {node.id}) has no listener {listener}"
    if node is None or address is None:
        return find_coordinator.encode_response(version, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                error_message=unavailable)
    return find_coordinator.encode_response(version, ErrorCode.NONE, node.id, address[0], address[1])
