"""KIP-848's server-side assignors: "uniform" (balanced over every subscribed partition, sticky to the current
target) and "range" (per topic, ranges over the members subscribed to it, in member id order; rack-aware).

An assignor is a pure function: (members' subscriptions, partition counts of the subscribed topics, the current
target assignment, the racks) -> the new target assignment, member id -> {(topic, partition)}.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]
Assignment = dict[str, set[TopicPartition]]


@dataclass(frozen=True)
class Racks:
    """Members' racks (their ``client.rack``) and the racks of each partition's replicas (their brokers'
    ``broker.rack``, which is a ferry broker's datacenter); empty: nothing to be rack-aware about."""

    members: Mapping[str, str] = field(default_factory=dict)
    partitions: Mapping[TopicPartition, frozenset[str]] = field(default_factory=dict)

    def local(self, member: str, tp: TopicPartition) -> bool:
        rack = self.members.get(member)
        return rack is not None and rack in self.partitions.get(tp, frozenset())


NO_RACKS = Racks()
Assignor = Callable[[Mapping[str, frozenset[str]], Mapping[str, int], Mapping[str, set[TopicPartition]], Racks],
                    Assignment]


def uniform(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
            current: Mapping[str, set[TopicPartition]], racks: Racks = NO_RACKS) -> Assignment:
    """Balanced: every member gets floor or ceil of its share; a partition stays with its current owner while
    that owner is subscribed to it and under its share (fewer moves on a rebalance). Racks are not used."""
    members = sorted(subscriptions)
    out: Assignment = {m: set() for m in members}
    if not members:
        return out
    all_tps = [(t, p) for t in sorted(partitions) for p in range(partitions[t])
               if any(t in subscriptions[m] for m in members)]
    ceiling = -(-len(all_tps) // len(members))
    owner = {tp: m for m, tps in current.items() if m in out for tp in tps}
    unassigned = []
    for tp in all_tps:
        m = owner.get(tp)
        if m is not None and tp[0] in subscriptions[m] and len(out[m]) < ceiling:
            out[m].add(tp)
        else:
            unassigned.append(tp)
    for tp in unassigned:
        eligible = [m for m in members if tp[0] in subscriptions[m]]
        target = min(eligible, key=lambda m: (len(out[m]), m))
        out[target].add(tp)
    _rebalance(out, subscriptions)
    return out


def _rebalance(out: Assignment, subscriptions: Mapping[str, frozenset[str]]) -> None:
    """Move partitions from the most to the least loaded eligible member until no move narrows the gap
    (stickiness above can leave a member at the ceiling while another is two below)."""
    for _ in range(sum(len(v) for v in out.values()) + 1):
        moved = False
        for heavy in sorted(out, key=lambda m: -len(out[m])):
            for tp in sorted(out[heavy]):
                light = min((m for m in out if tp[0] in subscriptions[m]), key=lambda m: (len(out[m]), m))
                if len(out[light]) + 1 < len(out[heavy]):
                    out[heavy].discard(tp)
                    out[light].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


def range_(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
           current: Mapping[str, set[TopicPartition]], racks: Racks = NO_RACKS) -> Assignment:
    """Kafka's range: for each topic, its members in id order take contiguous ranges, the first
    (partitions mod members) one partition more; co-partitioned topics land together.

    Rack-aware as KIP-881's range: each member's quota stays the same, but first, member by member, it takes
    the partitions (in order) with a replica in its rack; then the rest are dealt in order. Without racks (or
    when every partition is in every rack) this is exactly the contiguous ranges above."""
    out: Assignment = {m: set() for m in subscriptions}
    for topic in sorted(partitions):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        share, extra = divmod(partitions[topic], len(members))
        quota = {m: share + (1 if i < extra else 0) for i, m in enumerate(members)}
        left = [(topic, p) for p in range(partitions[topic])]
        for m in members:
            if m not in racks.members:
                continue
            mine = [tp for tp in left if racks.local(m, tp)][:quota[m]]
            out[m].update(mine)
            quota[m] -= len(mine)
            left = [tp for tp in left if tp not in set(mine)]
        for m in members:
            out[m].update(left[:quota[m]])
            left = left[quota[m]:]
    return out


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
