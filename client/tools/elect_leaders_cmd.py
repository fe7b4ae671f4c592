"""`ferry topics elect-leaders`: move leadership back to the preferred replicas (kafka-leader-election,
election type preferred).

A partition's preferred leader is the first broker of its replica list; placement spreads those evenly,
so after a broker restart (leadership moved away and stayed) this restores the balance. The request goes
where Kafka's ZooKeeper-based tool put it, ``/admin/preferred_replica_election``
``{"version":1,"partitions":[{"topic":t,"partition":p}]}``: the controller takes it (deletes the znode)
and elects, for each partition, the preferred replica if it is in the ISR. This command waits (bounded)
until the controller has done so and prints each partition's leader before and after.

Exit status: 0 every partition is led by its preferred replica; 1 one is not (its preferred replica is
not in the ISR, or the controller did not act in time), or a request is pending already; 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import time

from ferry.zk import ClusterRegistry, UnknownTopicError
from ferry.zk.cli_args import UsageError
from ferry.zk.preferred_election import election_pending, pending_partitions, request_preferred_election
from ferry.zk.znodes import NO_LEADER, PREFERRED_ELECTION_PATH, PartitionState

TopicPartition = tuple[str, int]
SETTLE_S = 5.0  # after the controller took the request: how long its state writes may take to show


def add_parsers(actions: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    p = actions.add_parser(
        "elect-leaders", help="make the preferred replicas leaders again (kafka-leader-election)",
        description="Ask the controller to make each partition's preferred replica (the first of its replica "
        "list) its leader again, when it is in the ISR, and print the leader before and after. Exit status 1 "
        "when a partition could not be moved (its preferred replica is not in sync) or the controller did not "
        "act within --election-timeout.")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="T", help="the partitions of this topic")
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    p.add_argument("--partition", type=int, metavar="P", help="only this partition of --topic")
    p.add_argument("--election-type", choices=["preferred"], default="preferred",
                   help="preferred (the only type; unclean election is a topic setting, "
                   "unclean.leader.election.enable)")
    p.add_argument("--election-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long to wait for the controller (default 30)")
    return [p]


def elect_leaders(registry: ClusterRegistry, args: argparse.Namespace, _config: dict[str, str]) -> int:
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition goes with --topic")
    if args.election_timeout <= 0:
        raise UsageError("--election-timeout must be positive")
    replicas = _selected(registry, args)
    before = _states(registry, {t for t, _ in replicas})
    wanted = sorted(tp for tp, r in replicas.items() if _leader(before.get(tp)) != r[0])
    if not wanted:
        _report(replicas, before, before, set(), set())
        print("Every selected partition is led by its preferred replica; no election needed.")
        return 0
    client = registry.client
    if not request_preferred_election(client, wanted):
        return _pending(registry)
    deadline = time.monotonic() + args.election_timeout
    while election_pending(client):
        if time.monotonic() >= deadline:
            print(f"ferry topics elect-leaders: the controller did not take the request within "
                  f"{args.election_timeout:g} s (is a broker running as controller? `ferry topics describe` shows "
                  f"leaders); it stays in {PREFERRED_ELECTION_PATH} for the next controller", file=sys.stderr)
            return 1
        time.sleep(0.1)
    live = set(registry.brokers())
    after = _settle(registry, replicas, wanted, live, min(deadline, time.monotonic() + SETTLE_S))
    failed = _report(replicas, before, after, set(wanted), live)
    if failed:
        print(f"ferry topics elect-leaders: {failed} partition(s) not led by their preferred replica (see above)",
              file=sys.stderr)
        return 1
    print(f"Successfully completed preferred leader election for {len(wanted)} partition(s).")
    return 0


def _selected(registry: ClusterRegistry, args: argparse.Namespace) -> dict[TopicPartition, tuple[int, ...]]:
    """(topic, partition) -> replica list of the partitions asked for."""
    if args.all_topic_partitions:
        topics = registry.topics()
    else:
        info = registry.topic(args.topic)
        if info is None:
            raise UnknownTopicError(f"topic {args.topic!r} does not exist")
        if args.partition is not None and args.partition not in info.replicas:
            raise UsageError(f"topic {args.topic!r} has no partition {args.partition} "
                             f"(partitions 0..{info.partition_count - 1})")
        topics = {info.name: info}
    return {(t, p): tuple(r) for t, info in topics.items() for p, r in info.replicas.items()
            if args.partition is None or p == args.partition}


def _states(registry: ClusterRegistry, topics: set[str]) -> dict[TopicPartition, PartitionState]:
    out: dict[TopicPartition, PartitionState] = {}
    for topic in sorted(topics):
        try:
            out.update({(topic, p): s for p, s in registry.partition_states(topic).items()})
        except UnknownTopicError:
            pass  # deleted meanwhile: reported without a leader
    return out


def _settle(registry: ClusterRegistry, replicas: dict[TopicPartition, tuple[int, ...]],
            wanted: list[TopicPartition], live: set[int], until: float) -> dict[TopicPartition, PartitionState]:
    """The states once every requested partition is led by its preferred replica, or cannot be (the
    preferred replica is out of the ISR), or ``until``: the controller deletes the request a moment
    before it writes the elections."""
    while True:
        states = _states(registry, {t for t, _ in replicas})
        if time.monotonic() >= until or all(
                _leader(states.get(tp)) == replicas[tp][0] or _why_not(replicas[tp], states.get(tp), live)
                for tp in wanted):
            return states
        time.sleep(0.1)


def _leader(state: PartitionState | None) -> int:
    return NO_LEADER if state is None else state.leader


def _why_not(replicas: tuple[int, ...], state: PartitionState | None, live: set[int]) -> str:
    """Why the preferred replica cannot lead ("" when nothing stands in the way)."""
    preferred = replicas[0]
    if state is None or state.leader_epoch < 0:
        return "the partition has no state"
    if preferred not in state.isr:
        return f"preferred replica {preferred} is not in the ISR ({','.join(map(str, state.isr)) or 'empty'})"
    if preferred not in live:  # an offline partition keeps its last ISR, dead members included
        return f"preferred replica {preferred} is in the ISR but not registered (down)"
    return ""


def _report(replicas: dict[TopicPartition, tuple[int, ...]], before: dict[TopicPartition, PartitionState],
            after: dict[TopicPartition, PartitionState], requested: set[TopicPartition], live: set[int]) -> int:
    """Print one line per partition; returns how many are not led by their preferred replica."""
    failed = 0
    for tp, reps in sorted(replicas.items()):
        old, new = _leader(before.get(tp)), _leader(after.get(tp))
        if new == reps[0]:
            outcome = "elected" if tp in requested and old != new else "already preferred"
        else:
            failed += 1
            why = _why_not(reps, after.get(tp), live) or "the controller did not move it (try again)"
            outcome = f"NOT elected: {why}"
        print(f"Topic: {tp[0]}\tPartition: {tp[1]}\tPreferred: {reps[0]}\tLeader before: {_name(old)}\t"
              f"Leader after: {_name(new)}\t{outcome}")
    return failed


def _name(leader: int) -> str:
    return "none" if leader == NO_LEADER else str(leader)


def _pending(registry: ClusterRegistry) -> int:
    pending = pending_partitions(registry.client)
    names = "unreadable" if pending is None else ",".join(f"{t}-{p}" for t, p in pending)
    print(f"ferry topics elect-leaders: refused: a preferred replica election is pending already "
          f"({PREFERRED_ELECTION_PATH}: {names or 'no partitions'}); the controller has not taken it yet "
          "(is a controller running?). Try again once it is gone.", file=sys.stderr)
    return 1
