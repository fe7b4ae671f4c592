"""Replica placement: Kafka's rack-unaware ``assignReplicasToBrokers`` over the live brokers.

Brokers are sorted by id. Partition ``p``'s first replica (its preferred leader) is broker
``(start + p) % n``: leaders go round-robin, so they are balanced within one partition. The
followers sit at ``first + 1 + (shift + j) % (n - 1)`` for ``j = 0 .. R-2``, with ``shift = start +
p // n``: every offset lies in ``1 .. n-1``, so no two replicas of a partition share a broker, and
the shift grows by one after each round of ``n`` partitions so that the followers of a broker's
partitions do not all land on the same neighbours (a dead broker's load spreads over the cluster).

``start`` is picked by a stable hash of the topic name (CRC-32, not Python's per-process ``hash``)
so that many small topics do not all put partition 0 on the lowest broker id, and every process
and every re-run places a topic the same way. Kafka picks a random start; it also restarts the
shift's counting at the first added partition when a topic grows. Here partition ``p``'s replicas
depend only on (topic, brokers, p, R), so partitions added later continue the creation's pattern
exactly (as long as the brokers are the same). With R = 1 this is plain round-robin from the hashed
start, the placement ferry has always used.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence

from ferry.zk.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError, NoBrokersError


def start_index(topic: str, broker_count: int) -> int:
    """Index (in the sorted live brokers) of partition 0's first replica."""
    return zlib.crc32(topic.encode("utf-8")) % broker_count


def check_replication_factor(value: object) -> int:
    """The replication factor as an int >= 1; InvalidReplicationFactorError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidReplicationFactorError(f"replication factor must be an integer, not {value!r}")
    if value < 1:
        raise InvalidReplicationFactorError(f"replication factor must be at least 1 (got {value})")
    return value


def assign_replicas(
    topic: str, broker_ids: Iterable[int], first: int, count: int, replication_factor: int
) -> dict[int, tuple[int, ...]]:
    """Replica lists (preferred leader first) for partitions ``first .. first+count-1`` of ``topic``.

    Raises NoBrokersError without brokers, InvalidReplicationFactorError when ``replication_factor``
    is below 1 or larger than the number of brokers.
    """
    rf = check_replication_factor(replication_factor)
    brokers = sorted(set(int(b) for b in broker_ids))
    n = len(brokers)
    if not brokers:
        raise NoBrokersError(f"no live brokers are registered; cannot place the partitions of topic {topic!r}")
    if rf > n:
        raise InvalidReplicationFactorError(
            f"replication factor {rf} is larger than the {n} registered broker{'s' if n != 1 else ''} "
            f"({', '.join(map(str, brokers))}); cannot place topic {topic!r}"
        )
    start = start_index(topic, n)
    out: dict[int, tuple[int, ...]] = {}
    for p in range(first, first + count):
        lead = (start + p) % n
        shift = start + p // n
        followers = (brokers[(lead + 1 + (shift + j) % (n - 1)) % n] for j in range(rf - 1))
        out[p] = (brokers[lead], *followers)
    return out


def assign_round_robin(topic: str, broker_ids: Iterable[int], first: int, count: int) -> dict[int, tuple[int, ...]]:
    """Leaders for partitions ``first .. first+count-1`` of ``topic`` (replication factor 1)."""
    return assign_replicas(topic, broker_ids, first, count, 1)


def check_assignment(
    topic: str, assignment: Mapping[int, Sequence[int]], broker_ids: Iterable[int]
) -> dict[int, tuple[int, ...]]:
    """A manual assignment (``kafka-topics --replica-assignment``, CreateTopics' assignments) checked as Kafka
    checks it: partitions 0..n-1, each a non-empty list of distinct live brokers, every list equally long.

    Raises InvalidReplicaAssignmentError saying what is wrong.
    """
    live = set(int(b) for b in broker_ids)
    if not assignment:
        raise InvalidReplicaAssignmentError(f"topic {topic!r}: the replica assignment names no partitions")
    out: dict[int, tuple[int, ...]] = {}
    for p, replicas in assignment.items():
        brokers = tuple(replicas)
        if not all(isinstance(b, int) and not isinstance(b, bool) for b in (p, *brokers)):
            raise InvalidReplicaAssignmentError(f"topic {topic!r}: partition {p!r}: broker ids must be integers")
        if not brokers:
            raise InvalidReplicaAssignmentError(f"topic {topic!r}: partition {p} has no replicas")
        if len(set(brokers)) != len(brokers):
            raise InvalidReplicaAssignmentError(
                f"topic {topic!r}: partition {p} names a broker twice ({', '.join(map(str, brokers))})")
        unknown = sorted(set(brokers) - live)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"topic {topic!r}: partition {p} names broker(s) {', '.join(map(str, unknown))} that are not "
                f"registered (live: {', '.join(map(str, sorted(live))) or 'none'})")
        out[p] = brokers
    if sorted(out) != list(range(len(out))):
        raise InvalidReplicaAssignmentError(
            f"topic {topic!r}: the assigned partitions must be 0..{len(out) - 1}, got {sorted(out)}")
    lengths = {len(r) for r in out.values()}
    if len(lengths) > 1:
        raise InvalidReplicaAssignmentError(
            f"topic {topic!r}: every partition needs the same number of replicas, got {sorted(lengths)}")
    return dict(sorted(out.items()))
