"""Asking the controller for preferred replica elections: the one writer of ``/admin/preferred_replica_election``
(Kafka's znode and format), used by `ferry topics elect-leaders` over ZooKeeper and by the brokers' ElectLeaders.
The controller elects each listed partition's first replica when it is in the ISR, then deletes the znode."""

from __future__ import annotations

import json

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ferry.zk.znodes import PREFERRED_ELECTION_PATH

TopicPartition = tuple[str, int]


def request_preferred_election(client: KazooClient, partitions: list[TopicPartition]) -> bool:
    """Hand ``partitions`` to the controller; False when a request is pending already (the controller takes one
    at a time: try again once it is gone)."""
    if client.exists(PREFERRED_ELECTION_PATH) is not None:
        return False
    doc = {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}
    client.ensure_path(PREFERRED_ELECTION_PATH.rsplit("/", 1)[0])
    try:
        client.create(PREFERRED_ELECTION_PATH, json.dumps(doc).encode())
    except NodeExistsError:
        return False
    return True


def election_pending(client: KazooClient) -> bool:
    return client.exists(PREFERRED_ELECTION_PATH) is not None


def pending_partitions(client: KazooClient) -> list[TopicPartition] | None:
    """The partitions of the pending request ([] when none is pending; None when it cannot be read)."""
    try:
        data, _ = client.get(PREFERRED_ELECTION_PATH)
    except NoNodeError:
        return []
    try:
        return [(i["topic"], int(i["partition"])) for i in json.loads(data or b"{}").get("partitions", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
