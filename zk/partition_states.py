"""Typed, conditional access to the partitions' state znodes (leader, leader epoch, ISR).

Every write is conditional on the znode version its writer last read, so two writers (the controller
electing a leader, the leader shrinking its ISR) can never overwrite each other's decision unseen: the
loser gets None back, re-reads and decides again. The controller's writes are also checked against the
version of ``/controller_epoch`` in the same ZooKeeper transaction, so a controller that has been replaced
(a zombie whose session expired) cannot change anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from ferry.zk.znodes import PartitionState, partition_state_path, topic_path

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def read_state(client: KazooClient, topic: str, partition: int, watch: Callable[[WatchedEvent], None] | None = None
               ) -> tuple[PartitionState, int] | None:
    """(state, znode version) of one partition; None when it has no state znode (yet)."""
    try:
        data, stat = client.get(partition_state_path(topic, partition), watch=watch)
    except NoNodeError:
        return None
    return _decode(topic, partition, data, stat)


def _decode(topic: str, partition: int, data: bytes | None, stat: ZnodeStat) -> tuple[PartitionState, int] | None:
    try:
        return PartitionState.decode(data or b"", f"state of {topic}-{partition}"), stat.version
    except ValueError as e:
        log.error("ignoring an unreadable partition state: %s", e)
        return None


def update_as_leader(client: KazooClient, topic: str, partition: int, state: PartitionState,
                     expected_version: int) -> int | None:
    """Write a leader's ISR change; the new znode version, or None when someone wrote first."""
    try:
        stat = client.set(partition_state_path(topic, partition), state.encode(), version=expected_version)
    except (BadVersionError, NoNodeError):
        return None
    return stat.version


def update_as_controller(client: KazooClient, topic: str, partition: int, state: PartitionState,
                         expected_version: int, controller_epoch_path: str, controller_epoch_version: int
                         ) -> tuple[bool, int | None]:
    """Write an election's outcome only while still the controller.

    Returns (still controller, new znode version or None if the state changed meanwhile). A missing state
    (``expected_version`` -1) is created, but only while the topic exists: a topic just deleted (its state
    znodes went with it) is never brought back as a data-less znode with a partition under it.
    """
    path = partition_state_path(topic, partition)
    tx = client.transaction()
    tx.check(controller_epoch_path, controller_epoch_version)
    if expected_version < 0:
        if client.exists(topic_path(topic)) is None:
            return True, None
        parent = path.rsplit("/", 1)[0]
        client.ensure_path(parent)
        tx.check(topic_path(topic), -1)  # deleted meanwhile: the whole transaction fails (NoNode)
        tx.create(path, state.encode())
    else:
        tx.set_data(path, state.encode(), version=expected_version)
    return _outcome(tx.commit())


def update_many_as_controller(client: KazooClient, updates: list[tuple[TopicPartition, PartitionState, int]],
                              controller_epoch_path: str, controller_epoch_version: int
                              ) -> tuple[bool, dict[TopicPartition, int | None]]:
    """update_as_controller for many partitions at once: each write is still its own transaction, checked
    against ``/controller_epoch`` and conditional on the state's version, but all are sent together and
    answered in order (one round trip's latency instead of one per partition). Missing states
    (version -1) go one by one through update_as_controller. Returns (still controller, tp -> new version
    or None when that state changed meanwhile); once the epoch check fails, no later outcome counts."""
    out: dict[TopicPartition, int | None] = {}
    pending = []
    for tp, state, version in updates:
        if version < 0:
            still, new_version = update_as_controller(client, tp[0], tp[1], state, version,
                                                      controller_epoch_path, controller_epoch_version)
            if not still:
                return False, out
            out[tp] = new_version
            continue
        tx = client.transaction()
        tx.check(controller_epoch_path, controller_epoch_version)
        tx.set_data(partition_state_path(*tp), state.encode(), version=version)
        pending.append((tp, tx.commit_async()))
    still_controller = True
    for tp, result in pending:
        still, new_version = _outcome(result.get())
        if not still:
            still_controller = False  # the rest failed the same check: nothing of theirs was written
        elif still_controller:
            out[tp] = new_version
    return still_controller, out


def _outcome(results: list[ZnodeStat | str | bool | Exception]) -> tuple[bool, int | None]:
    """(still controller, new version or None) from a controller write's transaction results."""
    epoch_result, write_result = results[0], results[-1]
    if isinstance(epoch_result, Exception) and not isinstance(epoch_result, RolledBackError):
        return False, None  # /controller_epoch moved on (or vanished): another controller rules
    failed = [r for r in results[1:] if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
    if failed and all(isinstance(r, (BadVersionError, NoNodeError, NodeExistsError)) for r in failed):
        return True, None
    if failed:
        raise failed[0]
    if isinstance(write_result, ZnodeStat):
        return True, write_result.version
    return True, 0  # a create: the new znode's version is 0
