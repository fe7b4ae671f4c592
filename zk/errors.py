"""Errors raised by the ZooKeeper registry (all carry a message fit for a CLI user)."""

from __future__ import annotations

from ferry.wire.protocol.errors import ErrorCode, KafkaResponseError


class RegistryError(Exception):
    """Base class of the cluster-registry errors."""


class ZooKeeperUnavailableError(RegistryError, ConnectionError):
    """No session with ZooKeeper within the time allowed (nothing listens, or no quorum): a runtime failure,
    not bad input, so a command exits 1 on it (ferry/cli_runner.py)."""


class InvalidZkConnectError(RegistryError, ValueError):
    """A malformed ``host:port[,host:port]/chroot`` string."""


class InvalidTopicError(RegistryError, ValueError):
    """A topic name Kafka would refuse (characters, length, "." / "..", collisions)."""


class InvalidPartitionsError(RegistryError, ValueError):
    """A partition count below 1, or an add_partitions that would not add any."""


class InvalidConfigError(RegistryError, ValueError):
    """A topic config that is not a mapping of non-empty string keys to string values."""


class TopicExistsError(RegistryError):
    """create_topic on a name that is already taken."""


class UnknownTopicError(RegistryError, KafkaResponseError, KeyError):
    """A topic (or partition) that does not exist: the registry has none by that name, or a broker answered
    UNKNOWN_TOPIC_OR_PARTITION. One class for both, so a caller catches it whoever found out."""

    CODE = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def __init__(self, what: str, code: int = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) -> None:
        KafkaResponseError.__init__(self, code, what)
        self.args = (what,)  # the message says it already: no code suffix

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class NoBrokersError(RegistryError):
    """No live broker is registered, so partitions cannot be assigned."""


class InvalidReplicationFactorError(RegistryError, ValueError):
    """A replication factor below 1, or larger than the number of live brokers (Kafka's code 38)."""

    kafka_error_code = 38


class InvalidReplicaAssignmentError(RegistryError, ValueError):
    """A manual replica assignment that is not 0..n-1 partitions of equally many distinct live brokers (code 39)."""

    kafka_error_code = 39


class BrokerIdConflictError(RegistryError):
    """Another live process holds /brokers/ids/<id>."""


class RegistryNotStartedError(RegistryError):
    """The registry was used before start() or after stop()."""
