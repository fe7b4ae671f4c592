"""Topic administration in the registry: create, grow, delete and read topics and their partition states.

A topic is its znode ``/brokers/topics/<t>`` (the replica assignment and config) plus one state znode
per partition, ``/brokers/topics/<t>/partitions/<p>/state`` (leader, leader epoch, ISR). Creating or
growing a topic writes both in ONE ZooKeeper transaction, so nobody (a broker's watch, the
controller) ever sees a partition without its initial state: leader = the first replica, epoch 0,
ISR = every replica (they are all empty, hence in sync).
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)

from ferry.zk.assignment import assign_replicas, check_assignment, check_replication_factor
from ferry.zk.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    RegistryError,
    TopicExistsError,
    UnknownTopicError,
)
from ferry.zk.registry_reads import live_brokers, read_children, read_topics
from ferry.zk.registry_session import RegistrySession
from ferry.zk.topic_name import colliding_topic, validate_topic_name
from ferry.zk.znodes import (
    BROKER_TOPICS_PATH,
    CONTROLLER_EPOCH_PATH,
    NO_LEADER,
    PartitionState,
    TopicInfo,
    new_topic_id,
    partition_state_path,
    partitions_path,
    topic_path,
)

log = logging.getLogger("ferry.zk.cluster_registry")  # one logger for the registry's parts
MAX_PARTITIONS = 100_000  # a sanity bound: each partition is a directory and open files on a broker


def _check_partition_count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPartitionsError(f"{what} must be an integer, not {value!r}")
    if value < 1:
        raise InvalidPartitionsError(f"{what} must be at least 1 (got {value})")
    if value > MAX_PARTITIONS:
        raise InvalidPartitionsError(f"{what} must be at most {MAX_PARTITIONS} (got {value})")
    return value


def _check_config(config: dict[str, str] | None) -> dict[str, str]:
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise InvalidConfigError(f"topic config must be a mapping of names to values, not {type(config).__name__}")
    out = {}
    for key, value in config.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidConfigError(f"topic config name {key!r} must be a non-empty string")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise InvalidConfigError(f"topic config {key!r} must be a string, not {value!r}")
        out[key.strip()] = str(value)
    return out


def controller_epoch(client: KazooClient) -> int:
    """The current ``/controller_epoch`` (0 before any controller was elected, or if unreadable)."""
    try:
        data, _ = client.get(CONTROLLER_EPOCH_PATH)
    except NoNodeError:
        return 0
    try:
        return int((data or b"0").decode("ascii").strip() or 0)
    except (UnicodeDecodeError, ValueError):
        log.warning("ignoring an unreadable %s: %r", CONTROLLER_EPOCH_PATH, data)
        return 0


def initial_state(replicas: tuple[int, ...], epoch: int) -> PartitionState:
    """A new partition's state: its preferred leader leads, every (empty) replica is in sync."""
    return PartitionState(leader=replicas[0], leader_epoch=0, isr=tuple(replicas), controller_epoch=epoch)


def _commit(tx: TransactionRequest, what: str) -> list:
    """Commit a kazoo transaction; the first real error (not the rolled-back rest) is raised."""
    results = tx.commit()
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            raise result
    if any(isinstance(r, Exception) for r in results):
        raise RegistryError(f"{what}: the ZooKeeper transaction was rolled back")
    return results


class TopicAdmin:
    """Creates, grows, deletes and reads topics and their partition states through the registry's session."""

    def __init__(self, session: RegistrySession) -> None:
        self._session = session

    def create_topic(
        self, name: str, partitions: int, config: dict[str, str] | None = None, replication_factor: int = 1
    ) -> TopicInfo:
        """Create a topic with its partitions' replicas spread over the live brokers (zk/assignment.py).

        Raises TopicExistsError, InvalidTopicError, InvalidPartitionsError, InvalidConfigError,
        NoBrokersError, InvalidReplicationFactorError (fewer live brokers than ``replication_factor``).
        """
        validate_topic_name(name)
        _check_partition_count(partitions, "partitions")
        check_replication_factor(replication_factor)
        config = _check_config(config)
        self._check_new_name(name)
        assignment = assign_replicas(name, live_brokers(self._session.client), 0, partitions, replication_factor)
        return self._write_new_topic(name, assignment, config)

    def create_topic_with_assignment(
        self, name: str, assignment: dict[int, list[int] | tuple[int, ...]], config: dict[str, str] | None = None
    ) -> TopicInfo:
        """Create a topic with the given replica lists (preferred leader first), e.g. from
        ``--replica-assignment``; InvalidReplicaAssignmentError unless they are 0..n-1 partitions of equally
        many distinct live brokers."""
        validate_topic_name(name)
        _check_partition_count(len(assignment) if isinstance(assignment, dict) else 0, "partitions")
        config = _check_config(config)
        self._check_new_name(name)
        checked = check_assignment(name, assignment, live_brokers(self._session.client))
        return self._write_new_topic(name, checked, config)

    def _check_new_name(self, name: str) -> None:
        existing = read_children(self._session.client, BROKER_TOPICS_PATH, None)
        if name in existing:
            raise TopicExistsError(f"topic {name!r} already exists")
        other = colliding_topic(name, existing)
        if other is not None:
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic {other!r} ('.' and '_' are interchangeable in metric names)"
            )

    def _write_new_topic(self, name: str, assignment: dict[int, tuple[int, ...]], config: dict[str, str]
                         ) -> TopicInfo:
        """The topic znode, ``partitions`` and every partition's initial state, in one transaction."""
        client = self._session.client
        info = TopicInfo.from_assignment(name, assignment, config, new_topic_id())
        client.ensure_path(BROKER_TOPICS_PATH)
        epoch = controller_epoch(client)
        tx = client.transaction()
        tx.create(topic_path(name), info.encode())
        tx.create(partitions_path(name), b"")
        _add_partition_ops(tx, name, assignment, epoch)
        try:
            _commit(tx, f"creating topic {name!r}")
        except NodeExistsError:
            raise TopicExistsError(f"topic {name!r} already exists") from None
        log.info("created topic %s with %d partitions (replication factor %d): %s", name, len(assignment),
                 len(assignment[0]), info.replicas)
        return info

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow ``name`` to ``total`` partitions with the topic's replication factor; existing partitions
        keep their replicas. The assignment is written conditionally on the version read (concurrent
        changes retry), together with the new partitions' states."""
        validate_topic_name(name)
        _check_partition_count(total, "total partitions")
        client = self._session.client
        for _ in range(20):  # compare-and-set against concurrent changes
            try:
                data, stat = client.get(topic_path(name))
            except NoNodeError:
                raise UnknownTopicError(f"topic {name!r} does not exist") from None
            current = TopicInfo.decode(name, data)
            if total <= current.partition_count:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {current.partition_count} partitions; "
                    f"the new total ({total}) must be larger (partitions can only be added)"
                )
            rf = len(current.replicas[0])
            added = assign_replicas(name, live_brokers(client), current.partition_count,
                                    total - current.partition_count, rf)
            info = TopicInfo.from_assignment(name, {**current.replicas, **added}, current.config,
                                             current.topic_id)
            tx = client.transaction()
            tx.set_data(topic_path(name), info.encode(), version=stat.version)
            if client.exists(partitions_path(name)) is None:  # a topic from before partition states
                tx.create(partitions_path(name), b"")
            _add_partition_ops(tx, name, added, controller_epoch(client))
            try:
                _commit(tx, f"adding partitions to topic {name!r}")
            except (BadVersionError, NodeExistsError):
                continue
            except NoNodeError:
                raise UnknownTopicError(f"topic {name!r} was deleted meanwhile") from None
            log.info("topic %s: %d -> %d partitions: %s", name, current.partition_count, total, added)
            return info
        raise InvalidPartitionsError(f"topic {name!r} kept changing while adding partitions; try again")

    def delete_topic(self, name: str) -> None:
        """Remove the topic's znode and its partition states at once (brokers see it through their topic watch)."""
        validate_topic_name(name)
        client = self._session.client
        for _ in range(20):
            paths = _subtree(client, topic_path(name))
            if not paths:
                raise UnknownTopicError(f"topic {name!r} does not exist")
            tx = client.transaction()
            for path in reversed(paths):  # children before their parents
                tx.delete(path)
            try:
                _commit(tx, f"deleting topic {name!r}")
                return
            except (NotEmptyError, NoNodeError):
                continue  # the subtree changed meanwhile: read it again
        client.delete(topic_path(name), recursive=True)

    def topic(self, name: str) -> TopicInfo | None:
        try:
            data, _ = self._session.client.get(topic_path(name))
        except NoNodeError:
            return None
        return TopicInfo.decode(name, data)

    def topics(self) -> dict[str, TopicInfo]:
        client = self._session.client
        return client.retry(read_topics, client, None)

    def partition_states(self, name: str) -> dict[int, PartitionState]:
        """Every partition's state (leader, leader epoch, ISR); a partition without a readable state znode
        (a topic from before replication, or a state being rewritten) shows leader -1, epoch -1, empty ISR."""
        info = self.topic(name)
        if info is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        client = self._session.client
        pending = {p: client.get_async(partition_state_path(name, p)) for p in sorted(info.partitions)}
        out: dict[int, PartitionState] = {}
        for p, result in pending.items():
            try:
                data, _ = result.get(timeout=self._session.timeout)
                out[p] = PartitionState.decode(data, f"state of {name}-{p}")
            except NoNodeError:
                out[p] = MISSING_STATE
            except ValueError as exc:
                log.warning("%s", exc)
                out[p] = MISSING_STATE
        return out


MISSING_STATE = PartitionState(leader=NO_LEADER, leader_epoch=-1, isr=())


def _add_partition_ops(tx: TransactionRequest, name: str, assignment: dict[int, tuple[int, ...]], epoch: int) -> None:
    """Transaction ops creating ``partitions/<p>`` and its initial state (a transaction does not makepath)."""
    for p, replicas in sorted(assignment.items()):
        state_path = partition_state_path(name, p)
        tx.create(state_path.rsplit("/", 1)[0], b"")
        tx.create(state_path, initial_state(replicas, epoch).encode())


def _subtree(client: KazooClient, root: str) -> list[str]:
    """``root`` and every znode below it, parents before children; [] when ``root`` does not exist."""
    out: list[str] = []
    stack = [root]
    while stack:
        path = stack.pop()
        try:
            children = client.get_children(path)
        except NoNodeError:
            if path == root:
                return []
            continue
        out.append(path)
        stack.extend(f"{path}/{c}" for c in sorted(children, reverse=True))
    return out
