"""Writing transaction markers (docs/transactions.md): the coordinator's commit or abort marker goes to every
partition of the transaction, wherever its leader is.

Partitions led here are appended to directly (``write_local``, also what a WriteTxnMarkers request from
another broker's coordinator runs); the others are sent to their leader as WriteTxnMarkers v0 over one
connection per broker. A marker counts as written once its leader has it and the ISR confirmed it (as an
acks=-1 produce). Failed partitions (leader moved, broker down) are retried with fresh metadata until the
deadline; a partition whose topic is gone, or whose producer already has a newer epoch there, needs no
marker any more.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ferry.broker.log.log_transactions import MARKER
from ferry.broker.server.log_flusher import LogFlusher
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.wire.async_broker_connection import AsyncBrokerConnection
from ferry.wire.protocol import write_txn_markers
from ferry.wire.protocol.errors import ErrorCode, error_code_of
from ferry.wire.record.control_batch import build_marker
from ferry.wire.sasl_login import ClientSecurity

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
RETRY_BACKOFF_S = 0.2
# answers that mean "this partition needs no (further) marker"
_DONE = {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH,
         ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}


class TxnMarkerWriter:
    def __init__(self, broker_id: int, metadata: MetadataCache, replicas: ReplicaManager, flusher: LogFlusher,
                 request_timeout_ms: int = 30_000, security: ClientSecurity | None = None) -> None:
        """``security``: TLS/SASL towards the other brokers (a secured inter-broker listener)."""
        self.security = security
        self.broker_id = broker_id
        self.metadata = metadata
        self.replicas = replicas
        self.flusher = flusher
        self.request_timeout_ms = request_timeout_ms
        self._conns: dict[int, AsyncBrokerConnection] = {}  # one per broker, one request at a time

    async def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    # ------------------------------------------------------------------ partitions led here
    async def write_local(self, producer_id: int, producer_epoch: int, committed: bool,
                          tps: list[TopicPartition], coordinator_epoch: int = 0) -> dict[TopicPartition, int]:
        """Append the marker to each partition led here; {tp: error code} once the ISR has them."""
        results: dict[TopicPartition, int] = {}
        waits = []
        for tp in tps:
            part, code = self.replicas.leader_partition(*tp)
            if code:
                results[tp] = code
                continue
            marker = build_marker(producer_id, producer_epoch, committed, coordinator_epoch)
            try:
                info = self.replicas.append(part, marker, MARKER)
            except Exception as e:
                results[tp] = error_code_of(e)
                if results[tp] == ErrorCode.UNKNOWN_SERVER_ERROR:
                    log.exception("marker append to %s-%d failed", *tp)
                continue
            waits.append((tp, part, info.last_offset + 1))
        outcomes = await asyncio.gather(*(self.replicas.acknowledge(part, end, self.request_timeout_ms, self.flusher)
                                          for _tp, part, end in waits))
        for (tp, _part, _end), (code, _message) in zip(waits, outcomes, strict=True):
            results[tp] = code
        return results

    # ------------------------------------------------------------------ anywhere
    async def write(self, producer_id: int, producer_epoch: int, committed: bool, tps: set[TopicPartition],
                    deadline: float) -> set[TopicPartition]:
        """Write the marker to every partition in ``tps``, retrying until ``deadline`` (monotonic); returns the
        partitions still without it (empty: done)."""
        pending = set(tps)
        while pending:
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                info = self.metadata.topics.get(tp[0])
                if info is None or tp[1] not in info.partitions:
                    pending.discard(tp)  # deleted: nothing to mark
                    continue
                entry = self.metadata.states.get(tp)
                leader = entry[0].leader if entry is not None else -1
                by_leader.setdefault(leader, []).append(tp)
            calls = []
            for leader, group in by_leader.items():
                if leader == self.broker_id:
                    calls.append(self.write_local(producer_id, producer_epoch, committed, group))
                elif leader >= 0:
                    calls.append(self._write_remote(leader, producer_id, producer_epoch, committed, group))
            for result in await asyncio.gather(*calls, return_exceptions=True):
                if isinstance(result, BaseException):
                    log.debug("marker write failed: %s", result)
                    continue
                for tp, code in result.items():
                    if code in _DONE:
                        pending.discard(tp)
            if not pending or time.monotonic() + RETRY_BACKOFF_S > deadline:
                break
            await asyncio.sleep(RETRY_BACKOFF_S)
        return pending

    async def _write_remote(self, leader: int, producer_id: int, producer_epoch: int, committed: bool,
                            tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        broker = self.metadata.brokers.get(leader)
        if broker is None:
            return {tp: ErrorCode.BROKER_NOT_AVAILABLE for tp in tps}
        conn = self._conns.get(leader)
        if conn is None or (conn.host, conn.port) != (broker.host, broker.port):
            if conn is not None:
                conn.close()
            conn = self._conns[leader] = AsyncBrokerConnection(
                leader, broker.host, broker.port, f"txn-coordinator-{self.broker_id}", self.request_timeout_ms / 1000.0,
                self.security)
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        request = write_txn_markers.encode_request([write_txn_markers.TxnMarker(
            producer_id, producer_epoch, committed, sorted(by_topic.items()))])
        try:
            body = await conn.request(*request, self.request_timeout_ms / 1000.0 + 5)
        except ConnectionError as e:  # BrokerUnavailableError: the connection closed itself
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, str(e) or type(e).__name__)
            return {tp: ErrorCode.NETWORK_EXCEPTION for tp in tps}
        codes = write_txn_markers.parse_response(body).get(producer_id, {})
        return {tp: codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in tps}

