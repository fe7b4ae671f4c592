"""Partition reassignment plans as kafka-reassign-partitions reads and writes them (pure functions).

The JSON is Kafka's, so that plans move between ferry and Kafka's tooling unchanged:
``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}`` (an optional
``"log_dirs"`` list must hold ``"any"`` only: a ferry broker has one log directory). The same document,
written to ``/admin/reassign_partitions``, is the controller's request (zk/znodes.py).

Proposals follow Kafka's ``--generate``: the topic's partitions placed afresh over the given brokers by
``assign_replicas`` (zk/assignment.py, Kafka's rack-unaware placement). Changing the replication factor
is ferry's addition (Kafka needs a hand-written plan for that): every partition keeps its current
replicas first, in order, so its preferred leader stays the one it has now and no leadership moves; the
missing replicas are taken from the fresh placement's list for the new factor (spread as a new topic's
would be). Lowering it keeps the first R current replicas.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ferry.zk.assignment import assign_replicas, check_replication_factor
from ferry.zk.znodes import PartitionState, TopicInfo

TopicPartition = tuple[str, int]
Plan = dict[TopicPartition, tuple[int, ...]]  # (topic, partition) -> target replica list, preferred leader first


class ReassignmentPlanError(ValueError):
    """A reassignment plan (or its inputs) that cannot be carried out; the message says why, in one line."""


# ---------------------------------------------------------------------------- JSON
def encode_plan(plan: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's reassignment JSON, partitions sorted by topic and number (one line, as Kafka prints it)."""
    parts = [{"topic": t, "partition": p, "replicas": list(plan[(t, p)])} for t, p in sorted(plan)]
    return json.dumps({"version": 1, "partitions": parts})


def decode_plan(text: str, what: str = "reassignment JSON") -> Plan:
    """Parse and check the shape of Kafka's reassignment JSON (not the cluster: see check_plan).

    Refused as Kafka refuses: not JSON, a version other than 1, no partitions, an entry without
    topic/partition/replicas, a partition named twice, a replica list empty or naming a broker twice,
    ``log_dirs`` of the wrong length or naming a directory (only "any").
    """
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReassignmentPlanError(f"{what} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ReassignmentPlanError(f"{what} must be an object like "
                                    '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}')
    version = doc.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise ReassignmentPlanError(f"{what}: unsupported version {version!r} (only 1)")
    entries = doc.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise ReassignmentPlanError(f"{what}: \"partitions\" must be a non-empty list")
    plan: Plan = {}
    for i, entry in enumerate(entries):
        tp, replicas = _decode_entry(entry, f"{what}: partitions[{i}]")
        if tp in plan:
            raise ReassignmentPlanError(f"{what}: partition {tp[0]}-{tp[1]} is listed twice")
        plan[tp] = replicas
    return plan


def _decode_entry(entry: Any, what: str) -> tuple[TopicPartition, tuple[int, ...]]:
    if not isinstance(entry, dict):
        raise ReassignmentPlanError(f"{what} must be an object with topic, partition and replicas")
    topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
    if not isinstance(topic, str) or not topic:
        raise ReassignmentPlanError(f"{what}: \"topic\" must be a topic name")
    if not _is_int(partition) or partition < 0:
        raise ReassignmentPlanError(f"{what}: \"partition\" of {topic} must be a partition number >= 0")
    name = f"{topic}-{partition}"
    if not isinstance(replicas, list) or not replicas or not all(_is_int(b) for b in replicas):
        raise ReassignmentPlanError(f"{what}: \"replicas\" of {name} must be a non-empty list of broker ids")
    if len(set(replicas)) != len(replicas):
        raise ReassignmentPlanError(f"{what}: the replicas of {name} name a broker twice ({_ids(replicas)})")
    log_dirs = entry.get("log_dirs")
    if log_dirs is not None:
        if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
            raise ReassignmentPlanError(f"{what}: \"log_dirs\" of {name} must list one entry per replica")
        if any(d != "any" for d in log_dirs):
            raise ReassignmentPlanError(f"{what}: \"log_dirs\" of {name} may only say \"any\" (a ferry broker has one "
                                        "log directory)")
    return (topic, int(partition)), tuple(int(b) for b in replicas)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ids(brokers: Iterable[int]) -> str:
    return ",".join(map(str, brokers))


# ---------------------------------------------------------------------------- checks against the cluster
def check_plan(plan: Plan, topics: Mapping[str, TopicInfo], live: Iterable[int]) -> None:
    """Every topic and partition exists, every replica is a registered broker. ReassignmentPlanError otherwise.

    New replicas must be registered to copy the data, and the controller only completes a reassignment
    once every target replica is in the ISR, so a plan naming a dead broker would hang: refused up front.
    """
    live_ids = set(live)
    for (topic, p), replicas in sorted(plan.items()):
        info = topics.get(topic)
        if info is None:
            raise ReassignmentPlanError(f"topic {topic!r} does not exist")
        if p not in info.replicas:
            raise ReassignmentPlanError(f"topic {topic!r} has no partition {p} (partitions 0..{info.partition_count - 1})")
        dead = [b for b in replicas if b not in live_ids]
        if dead:
            raise ReassignmentPlanError(f"{topic}-{p}: broker(s) {_ids(dead)} are not registered "
                                        f"(live: {_ids(sorted(live_ids)) or 'none'})")


def parse_broker_list(text: str) -> list[int]:
    """``--broker-list 1,2,3`` -> [1, 2, 3] (distinct ids); ReassignmentPlanError otherwise."""
    try:
        brokers = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ReassignmentPlanError(f"--broker-list {text!r} must be broker ids separated by commas (e.g. 1,2,3)") from None
    if not brokers:
        raise ReassignmentPlanError("--broker-list names no brokers")
    if len(set(brokers)) != len(brokers):
        raise ReassignmentPlanError(f"--broker-list {text!r} names a broker twice")
    return brokers


# ---------------------------------------------------------------------------- proposals
def current_plan(topics: Iterable[TopicInfo]) -> Plan:
    """The replica lists the given topics have now (Kafka prints them to keep for a rollback)."""
    return {(info.name, p): tuple(replicas) for info in topics for p, replicas in info.replicas.items()}


def propose(info: TopicInfo, brokers: Sequence[int], replication_factor: int | None = None) -> Plan:
    """A new placement of every partition of ``info`` over ``brokers`` (see the module docstring).

    ``replication_factor`` None or equal to the topic's: Kafka's fresh placement (to move partitions
    onto other brokers). Different: the current replicas kept first, the rest from the fresh placement.
    ReassignmentPlanError when the brokers are too few for the factor.
    """
    current = {p: tuple(r) for p, r in info.replicas.items()}
    rf_now = max((len(r) for r in current.values()), default=1)
    try:
        rf = rf_now if replication_factor is None else check_replication_factor(replication_factor)
        fresh = assign_replicas(info.name, brokers, 0, len(current), rf)
    except ValueError as exc:  # InvalidReplicationFactorError: fewer brokers than the factor
        raise ReassignmentPlanError(str(exc)) from None
    if replication_factor is None or rf == rf_now:
        return {(info.name, p): fresh[p] for p in sorted(current)}
    allowed = set(brokers)
    out: Plan = {}
    for p in sorted(current):
        kept = [b for b in current[p] if b in allowed][:rf]
        kept += [b for b in fresh[p] if b not in kept][: rf - len(kept)]
        out[(info.name, p)] = tuple(kept)
    return out


# ---------------------------------------------------------------------------- progress
def is_complete(target: Sequence[int], replicas_now: Sequence[int] | None, state: PartitionState | None) -> bool:
    """Done = the topic's replica list is the target (the controller's last step) and every target
    replica is in the ISR (each holds the data up to the high watermark)."""
    if replicas_now is None or tuple(replicas_now) != tuple(target) or state is None:
        return False
    return set(target) <= set(state.isr)
