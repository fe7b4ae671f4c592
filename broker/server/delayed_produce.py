"""acks=-1: the answer to a produce (or a transaction marker write) once the leader flushed the append and
every in-sync replica has it (Kafka's DelayedProduce), or the error saying why not. The wait is parked in the
fetch purgatory on the partition's log and re-checked whenever that log's replication state moves.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ferry.broker.server.fetch_purgatory import FetchPurgatory
from ferry.broker.server.log_flusher import LogFlusher
from ferry.broker.server.partition import Partition
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.record.errors import KafkaStorageError

log = logging.getLogger(__name__)


async def acknowledge(part: Partition, end: int, timeout_ms: int, flusher: LogFlusher,
                      purgatory: FetchPurgatory | None, request_timeout_ms: int) -> tuple[int, str | None]:
    """(error code, message) once the leader flushed up to ``end`` and the ISR has it; ``timeout_ms`` (the
    request's, capped by request.timeout.ms) bounds the wait for the ISR."""
    try:
        await flusher.flushed_to(part.log, end)
    except Exception as e:
        if not isinstance(e, KafkaStorageError):  # a log dir failure is logged once, by the log layer
            log.error("flush of %s failed: %s", part.log, e)
        return ErrorCode.KAFKA_STORAGE_ERROR, f"flush failed: {e}"
    timeout_ms = min(timeout_ms, request_timeout_ms) if timeout_ms > 0 else request_timeout_ms
    code = await committed(part, end, timeout_ms, purgatory)
    if code == ErrorCode.NONE:
        return code, None
    if code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
        return code, f"written, but the ISR {list(part.isr)} shrank below min.insync.replicas {part.min_isr}"
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return code, f"the ISR {list(part.isr)} did not confirm within {timeout_ms} ms"
    return code, "leadership moved before the ISR confirmed the write"

async def committed(part: Partition, end: int, timeout_ms: int, purgatory: FetchPurgatory | None) -> int:
    """Wait until every ISR member has the appended offsets below ``end``; the answer's error code."""
    deadline = time.monotonic() + max(timeout_ms, 1) / 1000.0
    epoch = part.leader_epoch
    while True:
        if not part.is_leader or part.leader_epoch != epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if part.replication_hw >= end:
            if len(part.isr) < part.min_isr:
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return ErrorCode.NONE
        remaining = deadline - time.monotonic()
        if remaining <= 0 or purgatory is None:
            return ErrorCode.REQUEST_TIMED_OUT
        fut = purgatory.watch([part.log])
        try:
            await asyncio.wait_for(fut, remaining)
        except TimeoutError:
            pass
        finally:
            purgatory.unwatch([part.log], fut)
