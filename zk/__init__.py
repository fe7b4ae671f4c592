"""ZooKeeper: connect strings, the cluster registry (brokers, topics)."""

from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.errors import (
    BrokerIdConflictError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    InvalidZkConnectError,
    NoBrokersError,
    RegistryError,
    RegistryNotStartedError,
    TopicExistsError,
    UnknownTopicError,
    ZooKeeperUnavailableError,
)
from ferry.zk.kazoo_client import connect
from ferry.zk.zk_connect import ZkConnect
from ferry.zk.znodes import BrokerInfo, TopicInfo

__all__ = [
    "BrokerIdConflictError",
    "BrokerInfo",
    "ClusterRegistry",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidTopicError",
    "InvalidZkConnectError",
    "NoBrokersError",
    "RegistryError",
    "RegistryNotStartedError",
    "TopicExistsError",
    "TopicInfo",
    "UnknownTopicError",
    "ZkConnect",
    "ZooKeeperUnavailableError",
    "connect",
]
