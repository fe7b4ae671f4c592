"""Where a partition's leader is: a WireClient for a cluster (bootstrap servers or ZooKeeper) and the leader
lookup with Kafka's wait for metadata — shared by the message-set producer and consumer."""

from __future__ import annotations

import time

from ferry.client.bootstrap import discover
from ferry.client.errors import BrokerUnavailableError, UnknownPartitionError, UnknownTopicError, for_code
from ferry.client.wire_client import WireClient
from ferry.wire.client_config import ClientConfig
from ferry.wire.protocol.errors import ErrorCode


def connect_cluster(bootstrap: str | None, zookeeper: str | None, client_id: str, timeout_s: float,
                    client_config: ClientConfig | None = None) -> WireClient:
    """A WireClient for ``bootstrap`` (host:port,...) or the live brokers registered in ``zookeeper`` (their
    listeners of ``client_config``'s security.protocol), secured as ``client_config`` says."""
    client_config = client_config or ClientConfig.plaintext()
    if bootstrap is None:
        if zookeeper is None:
            raise ValueError("give bootstrap servers (host:port,...) or a ZooKeeper connect string")
        bootstrap, _ = discover(zookeeper, timeout_s, client_config.security_protocol)
    return WireClient(bootstrap, client_id=client_id, timeout_s=timeout_s, connect_timeout_s=min(timeout_s, 10.0),
                      security=client_config.security())


def partition_leader(cluster: WireClient, topic: str, partition: int,
                     wait_s: float = 0.0) -> tuple[int, str, int]:
    """(node id, host, port) of the partition's leader: the client's cached Metadata, else fresh Metadata.

    Brokers learn of a new topic, or of a new leader, by ZooKeeper watch a moment after it is written:
    for up to ``wait_s`` an unknown topic or partition, or a missing leader, is asked about again (50 ms
    doubling to 500 ms between asks), as Kafka clients wait for metadata. Then UnknownTopicError /
    UnknownPartitionError if the cluster does not have it, BrokerUnavailableError if it has no leader.
    """
    node = cluster.leaders.get((topic, partition))
    if node is not None and node in cluster.brokers:
        addr = cluster.brokers[node]
        return node, addr[0], addr[1]
    deadline = time.monotonic() + wait_s
    pause = 0.05
    while True:
        try:
            return _fresh_leader(cluster, topic, partition)
        except (UnknownTopicError, BrokerUnavailableError):
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.5)


def _fresh_leader(cluster: WireClient, topic: str, partition: int) -> tuple[int, str, int]:
    md = cluster.refresh_metadata([topic])
    t = md.topics.get(topic)
    if t is None or t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or (t.error_code == 0
                                                                             and not t.partitions):
        raise UnknownTopicError(f"topic {topic!r} does not exist in the cluster")
    if t.error_code == ErrorCode.LEADER_NOT_AVAILABLE:
        raise BrokerUnavailableError(f"{topic}[{partition}] has no leader right now")
    if t.error_code != ErrorCode.NONE:
        raise for_code(t.error_code, f"metadata for topic {topic!r}")
    if not any(p.partition == partition for p in t.partitions):
        raise UnknownPartitionError(f"topic {topic!r} has partitions 0..{len(t.partitions) - 1}, "
                                    f"not {partition}")
    node = cluster.leaders.get((topic, partition))
    addr = cluster.brokers.get(node) if node is not None else None
    if node is None or addr is None:
        raise BrokerUnavailableError(f"{topic}[{partition}] has no leader right now")
    return node, addr[0], addr[1]


def check_login(client_config: ClientConfig, bootstrap: str | None, zookeeper: str | None,
                timeout_s: float = 10.0) -> None:
    """For a secured client: one Metadata request through ferry's own connection, so that a refused login (a
    wrong password, an untrusted certificate) is one line at once (AuthenticationError), where librdkafka
    would retry until its timeout. Plaintext: nothing to check."""
    if client_config.is_plaintext:
        return
    cluster = connect_cluster(bootstrap, zookeeper, "ferry-login-check", timeout_s, client_config)
    try:
        cluster.refresh_metadata([])
    finally:
        cluster.close()
