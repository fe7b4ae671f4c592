"""The rules a Produce request meets on either of its paths (ProduceFastPath for the common shape, ProduceApis
for everything): what ``acks`` asks for, and whether a partition takes the append now. Both paths call these,
so a request is accepted or refused alike whichever path reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ferry.broker.server.partition import Partition
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.wire.protocol.errors import ErrorCode


class AckMode(NamedTuple):
    """What a producer's ``acks`` asks of the broker."""

    answers: bool  # False (acks=0): no answer at all; a failure closes the connection instead
    waits_for_isr: bool  # True (acks=-1): answered once the leader flushed and the whole ISR has the batch


NO_ANSWER = AckMode(False, False)
LEADER = AckMode(True, False)
ALL_ISR = AckMode(True, True)
_BY_ACKS = {0: NO_ANSWER, 1: LEADER, -1: ALL_ISR}


# The one place ``acks`` is decided: ack_mode(acks) is the AckMode of 0, 1 or -1 as Kafka reads them, None for
# anything else (INVALID_REQUIRED_ACKS). A bound dict lookup, not a Python function: the fast path calls it per
# request.
ack_mode: Callable[[int], AckMode | None] = _BY_ACKS.get


def produce_target(replicas: ReplicaManager, topic: str, partition: int, mode: AckMode | None,
                   size: int) -> tuple[Partition | None, int, str | None]:
    """The led partition that takes an append of ``size`` record bytes under ``mode`` now, or (None, error code,
    message) saying why not. Checked in Kafka's order: acks, leadership, an empty record set, then
    min.insync.replicas for acks=-1 (a batch it would refuse is never written)."""
    if mode is None:
        return None, ErrorCode.INVALID_REQUIRED_ACKS, None
    part = replicas.partitions.get((topic, partition))
    if part is None or not part.is_leader or part.log.offline:  # leader_partition says why (or acts on a watch)
        part, code = replicas.leader_partition(topic, partition)
        if code:
            return None, code, None
    if size <= 0:
        return None, ErrorCode.CORRUPT_MESSAGE, "empty record set"
    if mode.waits_for_isr and not part.enough_replicas():
        return None, ErrorCode.NOT_ENOUGH_REPLICAS, (f"the ISR {list(part.isr)} is smaller than "
                                                     f"min.insync.replicas {part.min_isr}")
    return part, 0, None  # 0: ErrorCode.NONE (an enum member costs a lookup per request here)
