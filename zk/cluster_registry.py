"""ClusterRegistry: one cluster's brokers and topics in ZooKeeper (paper section 3.3).

A broker registers itself as an ephemeral znode, so the registry always shows who is alive; topics
are persistent znodes holding their partition → broker assignment. The registry is a coordinator over
its parts, each owning its state: the kazoo session (RegistrySession), topic administration
(TopicAdmin), this broker's registration and the thread that keeps it across session expiries
(BrokerRegistration), and the watchers' notifier thread (RegistryNotifier).
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from ferry.zk.broker_registration import BrokerRegistration
from ferry.zk.registry_notifier import BrokersCallback, RegistryNotifier, TopicsCallback
from ferry.zk.registry_reads import live_brokers
from ferry.zk.registry_session import RegistrySession
from ferry.zk.topic_admin import TopicAdmin
from ferry.zk.zk_connect import ZkConnect
from ferry.zk.zk_tls import ZkTlsConfig
from ferry.zk.znodes import BrokerInfo, Endpoint, PartitionState, TopicInfo, broker_path


class ClusterRegistry:
    """Brokers and topics of the cluster rooted at ``zk_connect``'s chroot."""

    def __init__(self, zk_connect: str | ZkConnect, timeout: float = 10.0, create: bool = True,
                 tls: ZkTlsConfig | None = None) -> None:
        """``tls``: how to reach another cluster's ZooKeeper (a mirror link's); None: this process's settings."""
        zk = ZkConnect.parse(zk_connect) if isinstance(zk_connect, str) else zk_connect
        self.session = RegistrySession(zk, timeout, create, tls)
        self.topic_admin = TopicAdmin(self.session)
        self.broker_registration = BrokerRegistration(self.session)
        self.notifier = RegistryNotifier(self.session)
        self.session.on_connected(self.broker_registration.wake)
        self.session.on_connected(self.notifier.mark_all_dirty)

    @property
    def zk(self) -> ZkConnect:
        return self.session.zk

    @property
    def timeout(self) -> float:
        """Connect timeout and ZooKeeper session timeout, seconds."""
        return self.session.timeout

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> ClusterRegistry:
        if self.session.started:
            return self
        self.session.start()
        self.broker_registration.start()
        return self

    def stop(self) -> None:
        """Close the session: ZooKeeper deletes this broker's ephemeral node at once."""
        if not self.session.started:
            return
        self.broker_registration.stop(timeout=self.timeout + 5)
        self.notifier.stop(timeout=self.timeout + 5)
        self.session.stop()

    def __enter__(self) -> ClusterRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def connected(self) -> bool:
        """True while the session's connection to ZooKeeper is up."""
        return self.session.connected

    @property
    def client(self) -> KazooClient:
        """The registry's kazoo client (rooted at the cluster chroot) for components keeping their own znodes."""
        return self.session.client

    # ----------------------------------------------------------------- topics (TopicAdmin)
    def create_topic(
        self, name: str, partitions: int, config: dict[str, str] | None = None, replication_factor: int = 1
    ) -> TopicInfo:
        return self.topic_admin.create_topic(name, partitions, config, replication_factor)

    def create_topic_with_assignment(
        self, name: str, assignment: dict[int, list[int] | tuple[int, ...]], config: dict[str, str] | None = None
    ) -> TopicInfo:
        return self.topic_admin.create_topic_with_assignment(name, assignment, config)

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        return self.topic_admin.add_partitions(name, total)

    def delete_topic(self, name: str) -> None:
        self.topic_admin.delete_topic(name)

    def topic(self, name: str) -> TopicInfo | None:
        return self.topic_admin.topic(name)

    def topics(self) -> dict[str, TopicInfo]:
        return self.topic_admin.topics()

    def partition_states(self, name: str) -> dict[int, PartitionState]:
        return self.topic_admin.partition_states(name)

    # ----------------------------------------------------------------- watches (RegistryNotifier)
    def watch_topics(self, callback: TopicsCallback) -> None:
        """Call ``callback(all topics)`` now and after every change (topic created, grown or deleted)."""
        self.notifier.watch_topics(callback)

    def watch_brokers(self, callback: BrokersCallback) -> None:
        """Call ``callback(all live brokers)`` now and after every broker joins, leaves or re-registers."""
        self.notifier.watch_brokers(callback)

    # ----------------------------------------------------------------- brokers (BrokerRegistration)
    def register_broker(
        self, broker_id: int, host: str, port: int, datacenter: str = "", wait_for_stale: float | None = None,
        endpoints: tuple[Endpoint, ...] = (), ferry_version: str = "", native: str = "",
    ) -> BrokerInfo:
        """``endpoints``: every advertised listener (Kafka's endpoints list); host:port is the one older readers
        use (the PLAINTEXT listener if there is one)."""
        return self.broker_registration.register(broker_id, host, port, datacenter, wait_for_stale, endpoints,
                                                 ferry_version, native)

    def ensure_broker_id_free(self, broker_id: int, host: str, port: int,
                              holder_alive: Callable[[BrokerInfo], bool]) -> None:
        """Raise BrokerIdConflictError at once when a live broker elsewhere holds the id; wait out a stale one."""
        self.broker_registration.ensure_free(BrokerInfo(id=broker_id, host=host, port=port), holder_alive)

    def unregister_broker(self) -> None:
        self.broker_registration.unregister()

    @property
    def registration(self) -> BrokerInfo | None:
        return self.broker_registration.registration

    def brokers(self) -> dict[int, BrokerInfo]:
        """The live brokers, by id."""
        return live_brokers(self.session.client)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        try:
            data, _ = self.client.get(broker_path(broker_id))
        except NoNodeError:
            return None
        return BrokerInfo.decode(broker_id, data)
