"""The per-broker partition limit (Kafka's max.broker.partitions, KIP-578): a CreateTopics that would put more
replicas on some broker than the limit is refused before anything is written (POLICY_VIOLATION), so one request
(say 100,000 partitions) cannot give a broker more directories, files and memory than it was sized for."""

from __future__ import annotations

from collections import Counter
from typing import Any


def replicas_per_broker(topics: dict[str, Any]) -> Counter[int]:
    """How many partition replicas each broker holds, from the metadata cache's topics."""
    held: Counter[int] = Counter()
    for info in topics.values():
        lists = info.replicas or {p: (leader,) for p, leader in info.partitions.items()}
        for replicas in lists.values():
            held.update(replicas)
    return held


def partition_limit_error(topics: dict[str, Any], live_brokers: list[int], limit: int, partitions: int,
                          replication_factor: int, assignments: list | None) -> str | None:
    """Why creating the topic would break ``limit`` replicas on a broker, or None (limit <= 0: no limit).

    With explicit assignments the new replicas are counted per broker; otherwise they are spread evenly over the
    live brokers (as zk/assignment.py places them), so the busiest broker gets ceil(partitions * rf / brokers)."""
    if limit <= 0:
        return None
    held = replicas_per_broker(topics)
    new: Counter[int] = Counter()
    if assignments:
        for _, replicas in assignments:
            new.update(replicas)
    else:
        brokers = sorted(live_brokers) or [-1]
        rf = max(1, replication_factor)
        share = -(-partitions * rf // max(len(brokers), rf))
        for b in brokers[:max(len(brokers), 1)]:
            new[b] = share
    for broker, count in new.items():
        if held.get(broker, 0) + count > limit:
            return (f"{partitions} partition(s) would put {held.get(broker, 0) + count} partition replicas on "
                    f"broker {broker}, more than max.broker.partitions={limit} (it holds {held.get(broker, 0)})")
    return None
