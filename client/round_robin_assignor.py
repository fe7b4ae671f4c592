"""Round-robin partition split across all the topics a group reads (Kafka's later RoundRobinAssignor).

Algorithm 1 divides each topic on its own, so with many single-partition topics (a mirror's whitelist of
activity topics) the first member in sort order gets every one of them and the others idle. Here all
(topic, partition) pairs are sorted and dealt out one by one to the members in a fixed circular order,
each pair going to the next member subscribed to its topic. Still deterministic: every member computes
the same answer from the same view of ZooKeeper."""

from __future__ import annotations

from collections.abc import Mapping

TopicPartition = tuple[str, int]


def round_robin_share(partitions: Mapping[str, list[int]], subscribers: Mapping[str, list[str]],
                      me: str) -> list[TopicPartition]:
    """The pairs ``me`` should own; ``subscribers[topic]`` are the members reading that topic."""
    return round_robin_all(partitions, subscribers).get(me, [])


def round_robin_all(partitions: Mapping[str, list[int]], subscribers: Mapping[str, list[str]]
                    ) -> dict[str, list[TopicPartition]]:
    """Everyone's share (for tools and tests)."""
    members = sorted({m for ms in subscribers.values() for m in ms})
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if not members:
        return out
    subs = {t: set(ms) for t, ms in subscribers.items()}
    turn = 0
    for topic in sorted(partitions):
        readers = subs.get(topic)
        if not readers:
            continue
        for p in sorted(partitions[topic]):
            while members[turn % len(members)] not in readers:
                turn += 1
            out[members[turn % len(members)]].append((topic, p))
            turn += 1
    return out
