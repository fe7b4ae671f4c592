"""ZooKeeper: connect strings, the cluster registry (brokers, topics)."""

from broker.zk.cluster_registry import ClusterRegistry
from broker.zk.errors import (
    BrokerIdConflictError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    InvalidZkConnectError,
    NoBrokersError,
    RegistryError,
    RegistryNotStartedError,
    TopicExistsError,
    UnknownTopicError,
)
from broker.zk.kazoo_client import connect
from broker.zk.zk_connect import ZkConnect
from broker.zk.znodes import BrokerInfo, TopicInfo

__all__ = [
    "BrokerIdConflictError",
    "BrokerInfo",
    "ClusterRegistry",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidTopicError",
    "InvalidZkConnectError",
    "NoBrokersError",
    "RegistryError",
    "RegistryNotStartedError",
    "TopicExistsError",
    "TopicInfo",
    "UnknownTopicError",
    "ZkConnect",
    "connect",
]
