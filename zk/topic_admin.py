"""Topic administration in the registry: create, grow, delete and read topic assignments."""

from __future__ import annotations

import logging

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)

from ferry.zk.assignment import assign_round_robin
from ferry.zk.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
)
from ferry.zk.registry_notifier import read_children
from ferry.zk.topic_name import colliding_topic, validate_topic_name
from ferry.zk.znodes import (
    BROKER_TOPICS_PATH,
    TopicInfo,
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



class TopicAdmin:
    """Topic administration in the registry: create, grow, delete and read topic assignments (a part of ClusterRegistry)."""

    # ----------------------------------------------------------------- topics
    def create_topic(self, name: str, partitions: int, config: dict[str, str] | None = None) -> TopicInfo:
        """Create a topic, its partitions placed round-robin over the live brokers."""
        validate_topic_name(name)
        _check_partition_count(partitions, "partitions")
        config = _check_config(config)
        client = self.client
        existing = read_children(client, BROKER_TOPICS_PATH, None)
        if name in existing:
            raise TopicExistsError(f"topic {name!r} already exists")
        other = colliding_topic(name, existing)
        if other is not None:
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic {other!r} ('.' and '_' are interchangeable in metric names)"
            )
        assignment = assign_round_robin(name, self.brokers(), 0, partitions)
        info = TopicInfo.from_assignment(name, assignment, config)
        try:
            client.create(topic_path(name), info.encode(), makepath=True)
        except NodeExistsError:
            raise TopicExistsError(f"topic {name!r} already exists") from None
        log.info("created topic %s with %d partitions: %s", name, partitions, info.partitions)
        return info

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow ``name`` to ``total`` partitions; existing partitions keep their brokers."""
        validate_topic_name(name)
        _check_partition_count(total, "total partitions")
        client = self.client
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
            assignment = dict(current.replicas)
            added = total - current.partition_count
            assignment.update(assign_round_robin(name, self.brokers(), current.partition_count, added))
            info = TopicInfo.from_assignment(name, assignment, current.config)
            try:
                client.set(topic_path(name), info.encode(), version=stat.version)
            except BadVersionError:
                continue
            except NoNodeError:
                raise UnknownTopicError(f"topic {name!r} was deleted meanwhile") from None
            log.info("topic %s: %d -> %d partitions", name, current.partition_count, total)
            return info
        raise InvalidPartitionsError(f"topic {name!r} kept changing while adding partitions; try again")

    def delete_topic(self, name: str) -> None:
        """Remove the topic's assignment (brokers see it through their topic watch)."""
        validate_topic_name(name)
        try:
            self.client.delete(topic_path(name))
        except NoNodeError:
            raise UnknownTopicError(f"topic {name!r} does not exist") from None

    def topic(self, name: str) -> TopicInfo | None:
        try:
            data, _ = self.client.get(topic_path(name))
        except NoNodeError:
            return None
        return TopicInfo.decode(name, data)

    def topics(self) -> dict[str, TopicInfo]:
        return self.client.retry(self._read_topics, None)
