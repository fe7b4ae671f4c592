"""Replica placement (zk/assignment.py): Kafka's rack-unaware assignment, as a pure function."""

from __future__ import annotations

from collections import Counter

import pytest

from ferry.zk.assignment import assign_replicas, assign_round_robin, check_assignment, start_index
from ferry.zk.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError, NoBrokersError

TOPICS = ["page_view", "click", "search", "_audit", "t0", "t1", "t2", "a.b-c"]


def spread(counts: Counter, brokers: list[int]) -> int:
    """max - min of per-broker counts (brokers with none count as 0)."""
    values = [counts.get(b, 0) for b in brokers]
    return max(values) - min(values)


@pytest.mark.parametrize("n_brokers", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("topic", TOPICS)
def test_rf1_is_round_robin_from_the_hashed_start(topic: str, n_brokers: int) -> None:
    brokers = [b * 10 for b in range(1, n_brokers + 1)]  # ids need not be 0..n-1
    start = start_index(topic, n_brokers)
    expected = {p: (brokers[(start + p) % n_brokers],) for p in range(12)}
    assert assign_replicas(topic, reversed(brokers), 0, 12, 1) == expected
    assert assign_round_robin(topic, brokers, 0, 12) == expected
    assert assign_replicas(topic, brokers, 5, 4, 1) == {p: expected[p] for p in range(5, 9)}


@pytest.mark.parametrize(("n_brokers", "rf"), [(2, 2), (3, 2), (3, 3), (4, 3), (5, 3), (6, 4), (9, 3)])
@pytest.mark.parametrize("topic", TOPICS)
def test_distinct_replicas_and_balanced_leaders(topic: str, n_brokers: int, rf: int) -> None:
    brokers = list(range(1, n_brokers + 1))
    for count in (1, n_brokers - 1, n_brokers, 2 * n_brokers + 1, 50):
        if count < 1:
            continue
        a = assign_replicas(topic, brokers, 0, count, rf)
        assert sorted(a) == list(range(count))
        for p, replicas in a.items():
            assert len(replicas) == rf and len(set(replicas)) == rf, (p, replicas)
            assert set(replicas) <= set(brokers)
        leaders = Counter(r[0] for r in a.values())
        assert spread(leaders, brokers) <= 1, leaders
        # every broker holds about as many replicas as any other: one round of n partitions puts exactly
        # rf replicas on each broker, so only the last, partial round can tilt it (by at most rf)
        replicas = Counter(b for r in a.values() for b in r)
        assert spread(replicas, brokers) <= rf, replicas
        if count % n_brokers == 0:
            assert spread(replicas, brokers) == 0, replicas


def test_followers_spread_over_the_cluster() -> None:
    """A broker's partitions do not all follow the same neighbours: if it dies, many brokers share its load."""
    brokers = [1, 2, 3, 4, 5]
    a = assign_replicas("page_view", brokers, 0, 20, 2)
    for leader in brokers:
        followers = {r[1] for r in a.values() if r[0] == leader}
        assert len(followers) == 4, (leader, followers)  # every other broker, one round each


def test_kafka_example() -> None:
    """Kafka's documented example (5 brokers, 10 partitions, RF 3, start 0) with the start this topic hashes to."""
    brokers = [0, 1, 2, 3, 4]
    topic = next(t for t in (f"t{i}" for i in range(100)) if start_index(t, 5) == 0)
    a = assign_replicas(topic, brokers, 0, 10, 3)
    # AdminUtils' comment: p0..p4 leaders 0..4, followers shifted by 1; p5..p9 followers shifted by 2
    assert a == {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2),
    }


@pytest.mark.parametrize("topic", TOPICS)
def test_deterministic_and_growth_continues_the_pattern(topic: str) -> None:
    brokers = [3, 1, 2, 5, 4]
    whole = assign_replicas(topic, brokers, 0, 23, 3)
    assert assign_replicas(topic, sorted(brokers), 0, 23, 3) == whole  # order and duplicates do not matter
    assert assign_replicas(topic, brokers + [1, 2], 0, 23, 3) == whole
    grown = {**assign_replicas(topic, brokers, 0, 7, 3), **assign_replicas(topic, brokers, 7, 16, 3)}
    assert grown == whole  # adding partitions later places them as creating them at once would


def test_refusals() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="replication factor 3 is larger than the 2 registered"):
        assign_replicas("t", [1, 2], 0, 4, 3)
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 1 registered broker "):
        assign_replicas("t", [7], 0, 1, 2)
    for bad in (0, -1, True, "2", 1.5):
        with pytest.raises(InvalidReplicationFactorError):
            assign_replicas("t", [1, 2, 3], 0, 1, bad)  # type: ignore[arg-type]
    with pytest.raises(NoBrokersError, match="no live brokers"):
        assign_replicas("t", [], 0, 1, 1)
    assert issubclass(InvalidReplicationFactorError, ValueError)
    assert InvalidReplicationFactorError.kafka_error_code == 38
    assert assign_replicas("t", [1, 2], 0, 0, 2) == {}


def test_manual_assignments_checked_as_kafka_does() -> None:
    live = [1, 2, 3]
    assert check_assignment("t", {1: [2, 3], 0: (3, 1)}, live) == {0: (3, 1), 1: (2, 3)}
    for assignment, fragment in [
        ({}, "names no partitions"),
        ({0: []}, "has no replicas"),
        ({0: [1, 1]}, "names a broker twice"),
        ({0: [1, 4]}, "broker(s) 4 that are not registered (live: 1, 2, 3)"),
        ({0: [1, 2], 1: [3]}, "same number of replicas"),
        ({0: [1], 2: [2]}, "must be 0..1, got [0, 2]"),
        ({"0": [1]}, "must be integers"),
        ({0: [True]}, "must be integers"),
    ]:
        with pytest.raises(InvalidReplicaAssignmentError) as exc:
            check_assignment("t", assignment, live)  # type: ignore[arg-type]
        assert fragment in str(exc.value), (assignment, str(exc.value))
    assert InvalidReplicaAssignmentError.kafka_error_code == 39
