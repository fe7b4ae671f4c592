"""Partition reassignment, the controller's part (Kafka's ZooKeeper-era procedure).

A request in ``/admin/reassign_partitions`` names each partition's target replica list (RAR). For each one,
every step is idempotent and decided from what ZooKeeper holds now, so a new controller simply continues:

1. assignment = RAR followed by the old replicas not in it (the new ones start fetching; RAR's first
   stays the preferred leader), with the leader epoch bumped so every broker re-reads its role;
2. wait until every RAR member is in the ISR (the data is copied before anything switches);
3. if the leader is not in RAR, elect the first RAR member of the ISR (new leader epoch);
4. assignment = RAR, ISR = ISR ∩ RAR (new leader epoch): the old replicas stop and delete their copy.

When every partition of the request is done the request znode is deleted.
"""

from __future__ import annotations

import json
import logging

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from ferry.zk.znodes import (
    CONTROLLER_EPOCH_PATH,
    REASSIGN_PARTITIONS_PATH,
    PartitionState,
    TopicInfo,
    partition_state_path,
    topic_path,
)

log = logging.getLogger("ferry.broker.server.controller")

TopicPartition = tuple[str, int]


def read_request(client: KazooClient) -> tuple[dict[TopicPartition, tuple[int, ...]], int] | None:
    """The pending targets and the request znode's version; None when there is no request."""
    try:
        data, stat = client.get(REASSIGN_PARTITIONS_PATH)
    except NoNodeError:
        return None
    targets: dict[TopicPartition, tuple[int, ...]] = {}
    try:
        for item in json.loads(data or b"{}").get("partitions", []):
            replicas = tuple(int(b) for b in item["replicas"])
            if replicas and len(set(replicas)) == len(replicas):
                targets[(str(item["topic"]), int(item["partition"]))] = replicas
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        log.error("ignoring a malformed partition reassignment request: %s", e)
    return targets, stat.version


def step(client: KazooClient, epoch_version: int, controller_epoch: int, tp: TopicPartition, target: tuple[int, ...],
         states: dict[TopicPartition, tuple[PartitionState, int]]) -> bool | None:
    """Advance one partition's reassignment by at most one step. True when it is complete; False when it
    waits; None when this broker is no longer the controller."""
    topic, p = tp
    try:
        data, tstat = client.get(topic_path(topic))
    except NoNodeError:
        log.warning("reassignment of %s-%d: the topic does not exist; dropped", topic, p)
        return True
    info = TopicInfo.decode(topic, data)
    current = info.replicas.get(p)
    entry = states.get(tp)
    if current is None or entry is None:
        log.warning("reassignment of %s-%d: no such partition (or no state yet)", topic, p)
        return current is None
    state, sversion = entry
    if current == target:
        return True
    union = target + tuple(r for r in current if r not in target)
    cepoch = controller_epoch
    if current != union:
        new_state = PartitionState(state.leader, state.leader_epoch + 1, state.isr, cepoch)
        log.info("reassignment of %s-%d: replicas %s -> %s (adding %s)", topic, p, list(current), list(union),
                 [r for r in target if r not in current])
        return _write(client, epoch_version, info, p, union, tstat.version, tp, new_state, sversion)
    if not set(target) <= set(state.isr):
        return False  # the new replicas are still copying
    if state.leader not in target:
        leader = next(r for r in target if r in state.isr)
        new_state = PartitionState(leader, state.leader_epoch + 1, state.isr, cepoch)
        log.info("reassignment of %s-%d: leader %d -> %d", topic, p, state.leader, leader)
        return _write(client, epoch_version, None, p, None, -1, tp, new_state, sversion)
    new_state = PartitionState(state.leader, state.leader_epoch + 1, tuple(b for b in state.isr if b in target),
                               cepoch)
    log.info("reassignment of %s-%d: replicas %s -> %s (complete)", topic, p, list(current), list(target))
    written = _write(client, epoch_version, info, p, target, tstat.version, tp, new_state, sversion)
    return None if written is None else False  # complete once the next pass sees the target


def _write(client: KazooClient, epoch_version: int, info: TopicInfo | None, p: int, replicas: tuple[int, ...] | None,
           topic_version: int, tp: TopicPartition, state: PartitionState, state_version: int) -> bool | None:
    """Topic assignment and partition state in one transaction fenced by the controller epoch."""
    tx = client.transaction()
    tx.check(CONTROLLER_EPOCH_PATH, epoch_version)
    if info is not None and replicas is not None:
        assignment = dict(info.replicas)
        assignment[p] = replicas
        new_info = TopicInfo.from_assignment(info.name, assignment, info.config, info.topic_id)
        tx.set_data(topic_path(info.name), new_info.encode(), version=topic_version)
    tx.set_data(partition_state_path(*tp), state.encode(), version=state_version)
    results = tx.commit()
    first = results[0]
    if isinstance(first, Exception) and type(first).__name__ != "RolledBackError":
        return None
    if any(isinstance(r, (BadVersionError, NoNodeError)) for r in results[1:]):
        return False  # someone wrote first: decided again on the next pass
    return False


def finish(client: KazooClient, version: int, done: set[TopicPartition], targets: dict[TopicPartition, tuple[int, ...]]
           ) -> None:
    """Rewrite the request without the finished partitions, or delete it when none is left."""
    left = {tp: r for tp, r in targets.items() if tp not in done}
    try:
        if not left:
            client.delete(REASSIGN_PARTITIONS_PATH, version=version)
            log.info("partition reassignment complete")
            return
        doc = {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                            for (t, p), r in sorted(left.items())]}
        client.set(REASSIGN_PARTITIONS_PATH, json.dumps(doc).encode(), version=version)
    except (NoNodeError, BadVersionError):
        pass  # changed meanwhile: the next pass reads it again
