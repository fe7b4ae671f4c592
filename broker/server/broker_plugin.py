"""What a component embedded in the broker process may use, and how the broker starts and stops it.

The embedded mirror (the paper's "set of embedded consumers" in the offline brokers) is such a component: its
copy engine is the mirror layer's, above the broker in the layering, so the broker cannot import it; the
`ferry broker` command composes it in (ferry/broker_cmd.py) and the broker hands it these services once it is
registered and serving. A plugin runs on the broker's event loop and must never block it (ZooKeeper and file
work go to ``executor``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.metrics_core import Metric

from ferry.broker.server.broker_config import BrokerConfig
from ferry.broker.server.log_flusher import LogFlusher
from ferry.broker.server.producer_id_manager import ProducerIdManager
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.wire.client_config import ClientConfig
from ferry.zk.cluster_registry import ClusterRegistry


@dataclass(frozen=True)
class BrokerServices:
    config: BrokerConfig
    loop: asyncio.AbstractEventLoop
    executor: Executor
    registry: ClusterRegistry  # this (offline) cluster's ZooKeeper
    replicas: ReplicaManager  # the partitions led here, and the leader append
    producer_ids: ProducerIdManager
    # the broker's own login to this cluster (its inter-broker listener and user): a plugin producing here (the
    # mirror links' audit counts) writes as the broker's principal, as replication does
    own_client: ClientConfig = field(default_factory=ClientConfig.plaintext)
    # the broker's group commit (acks=all's fsync): the mirror links flush a caught-up copy through it
    flusher: LogFlusher | None = None


class BrokerPlugin(Protocol):
    async def start(self, services: BrokerServices) -> None:
        """Called once the broker is registered and its controller candidacy runs."""

    async def stop(self) -> None:
        """Called first at shutdown, before replication stops and the logs close."""

    def collect(self) -> Iterator[Metric]:
        """The plugin's Prometheus metrics, served on the broker's /metrics (read at scrape time)."""
