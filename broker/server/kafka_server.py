"""KafkaServer: one broker process. Wires the LogManager (storage), the ClusterRegistry (ZooKeeper), the
metadata cache fed by registry watches, the partition state watcher, the replica manager and its fetchers,
the controller candidacy and the socket server; registers /brokers/ids/<id> once it listens. On
SIGTERM/SIGINT it first asks the controller to move its leaderships away (controlled shutdown), then
unregisters, closes connections and flushes every log.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from concurrent.futures import ThreadPoolExecutor

from ferry.broker.log.log_cleaner import LogCleaner
from ferry.broker.log.log_manager import LogManager
from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.broker_config import BrokerConfig
from ferry.broker.server.broker_metrics import BrokerCollector, serve
from ferry.broker.server.broker_plugin import BrokerPlugin, BrokerServices
from ferry.broker.server.consumer_group_coordinator import ConsumerGroupSettings
from ferry.broker.server.controller import KafkaController
from ferry.broker.server.fetch_purgatory import FetchPurgatory
from ferry.broker.server.group_coordinator import GroupCoordinator, GroupSettings
from ferry.broker.server.kafka_apis import KafkaApis
from ferry.broker.server.log_dir_failure import LogDirFailureHandler, request_leadership_moves
from ferry.broker.server.log_flusher import LogFlusher
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.producer_id_manager import ProducerIdManager
from ferry.broker.server.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.sasl_authenticator import SaslServer
from ferry.broker.server.security_config import Listener
from ferry.broker.server.socket_server import SocketServer, bind_listener
from ferry.broker.server.ssl_factory import SslFactory
from ferry.broker.server.ssl_principal import PrincipalMapper
from ferry.broker.server.topic_deletion import TopicDeletion
from ferry.broker.server.transaction_coordinator import TransactionCoordinator, TxnSettings
from ferry.broker.server.transaction_markers import TxnMarkerWriter
from ferry.wire import native, release
from ferry.wire.client_config import ClientConfig
from ferry.wire.sasl_login import ClientSecurity, SaslLogin
from ferry.zk.acl_store import AclCache
from ferry.zk.client_quotas import QuotaConfigCache
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.errors import TopicExistsError
from ferry.zk.partition_state_watcher import PartitionStateWatcher
from ferry.zk.scram_credentials import ScramCredentialStore
from ferry.zk.topic_name import AUDIT_TOPIC
from ferry.zk.znodes import BrokerInfo, Endpoint

log = logging.getLogger(__name__)

METADATA_WAIT_S = 10.0
HOLDER_PROBE_S = 2.0  # how long a registered broker's address gets to accept a connection before it counts as gone


def _answers(holder: BrokerInfo) -> bool:
    """Whether the broker registered under our id still listens at its address: a live namesake (refuse at
    once) rather than a killed process whose ZooKeeper session has not expired yet (wait it out)."""
    try:
        socket.create_connection((holder.host, holder.port), timeout=HOLDER_PROBE_S).close()
        return True
    except OSError:
        return False


class KafkaServer:
    def __init__(self, config: BrokerConfig, plugins: tuple[BrokerPlugin, ...] = ()) -> None:
        """``plugins``: components embedded in the broker (the embedded mirror), composed in by `ferry broker`."""
        self.config = config
        self.plugins = plugins
        self.log_manager: LogManager | None = None
        self.log_cleaner: LogCleaner | None = None
        self.registry: ClusterRegistry | None = None
        self.acl_cache: AclCache | None = None
        self.quota_cache: QuotaConfigCache | None = None
        self.socket_server: SocketServer | None = None  # the first listener's
        self.socket_servers: list[SocketServer] = []  # one per listener
        self._bound: list[tuple[Listener, socket.socket]] = []
        self.ssl_factory: SslFactory | None = None
        self.replicas: ReplicaManager | None = None
        self.registered = False  # /brokers/ids/<id> is ours: only then may a shutdown act as this id
        self._listener: socket.socket | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.controller: KafkaController | None = None
        self.log_dir_failures: LogDirFailureHandler | None = None
        self.groups: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        self._stop = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="broker-io")

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Start, serve until a stop signal, shut down cleanly."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.request_stop)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        try:
            await self.startup()
            await self._stop.wait()
            log.info("broker %d shutting down", self.config.broker_id)
        finally:
            await self.shutdown()

    async def startup(self) -> None:
        """Nothing acts on the cluster as this broker id until the id is known to be ours: the port is bound
        first and the id checked against a live holder (refused at once) or a stale one (waited out) before the
        log directory is opened, a follower fetch is sent or a partition directory is made."""
        cfg = self.config
        security = cfg.security
        assert security is not None
        loop = asyncio.get_running_loop()
        for spec in security.listeners:  # every port first: a taken one fails start-up before anything else
            self._bound.append((spec, bind_listener(spec.host, spec.port)))
        listener = self._bound[0][1]
        self._listener = listener
        if any(spec.uses_tls for spec in security.listeners):
            self.ssl_factory = SslFactory(security.ssl)  # a bad certificate or key fails start-up here
        log.info("broker %d starting: data dir %s, zookeeper %s, datacenter %s", cfg.broker_id, cfg.data_dir,
                 cfg.zookeeper, cfg.datacenter)
        self.registry = ClusterRegistry(cfg.zookeeper, timeout=cfg.zk_session_timeout_s)
        await loop.run_in_executor(self._executor, self.registry.start)
        inter_spec, inter_sock = next((spec, sock) for spec, sock in self._bound
                                      if spec.name == security.inter_broker_listener)
        await loop.run_in_executor(self._executor, self.registry.ensure_broker_id_free, cfg.broker_id,
                                   inter_spec.advertised_host,
                                   inter_spec.advertised_port or inter_sock.getsockname()[1], _answers)
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        # Recovery scans segments: do it off the loop (nothing else runs yet, but signals stay responsive).
        self.log_manager = await loop.run_in_executor(
            self._executor, lambda: LogManager(cfg.data_dir, cfg.log,
                                               retention_check_interval_ms=cfg.retention_check_interval_ms))

        purgatory = FetchPurgatory(loop)
        metadata = MetadataCache()
        # Parked fetches wake when a log's high watermark moves (flush, or append if unflushed is visible).
        self.log_manager.add_high_watermark_listener(purgatory.notify_threadsafe)
        replicas = self.replicas = ReplicaManager(cfg.broker_id, metadata, self.log_manager,
                                                  replica_lag_time_max_ms=cfg.replica_lag_time_max_ms)
        # Leaders and ISRs: every broker watches every partition's state znode (the controller writes them).
        states = PartitionStateWatcher(lambda: self.registry.client)
        metadata.states = states.states
        states.add_listener(replicas.on_state_threadsafe)
        self.fetchers = ReplicaFetcherManager(cfg.broker_id, metadata, replicas, FetcherSettings(
            wait_max_ms=cfg.replica_fetch_wait_max_ms, min_bytes=cfg.replica_fetch_min_bytes,
            max_bytes=cfg.replica_fetch_max_bytes, socket_timeout_ms=cfg.replica_socket_timeout_ms,
            truncation=cfg.replica_truncation, security=self._inter_broker_security()))
        replicas.request_timeout_ms = cfg.request_timeout_ms
        replicas.start(loop, purgatory, self.fetchers, lambda: self.registry.client, self._executor)
        # An IO error takes the data dir offline (log layer); this moves leadership away and brings it back.
        self.log_dir_failures = LogDirFailureHandler(cfg.broker_id, self.log_manager, replicas, lambda: states.states,
                                                     lambda: self.registry.client, self._executor)
        self.log_dir_failures.start(loop)
        # Read in bulk on the watcher's own thread: the registry's notifier goes on telling who is alive meanwhile.
        metadata.add_topics_listener(
            lambda topics: states.watch_in_background((t, p) for t, info in topics.items() for p in info.partitions))
        self.controller = KafkaController(
            cfg.broker_id, lambda: self.registry.client, metadata, states,
            log_defaults=cfg.log, auto_rebalance=cfg.auto_leader_rebalance_enable,
            rebalance_interval_s=cfg.leader_imbalance_check_interval_seconds)
        metadata.controller = lambda: self.controller.current_controller if self.controller else -1
        replicas.shutting_down = lambda: self.controller.shutting_down if self.controller else set()
        # A topic deleted from the registry: this broker drops its replicas and deletes their logs.
        TopicDeletion(replicas, self.log_manager, self._executor).start(loop, metadata)
        self.registry.watch_brokers(metadata.update_brokers)
        self.registry.watch_topics(metadata.update_topics)
        # Serve only after the first snapshot of the topics arrived (and our partitions have logs).
        if not await loop.run_in_executor(self._executor, metadata.topics_seen.wait, METADATA_WAIT_S):
            log.warning("no topic snapshot from ZooKeeper after %.0fs; serving anyway", METADATA_WAIT_S)
        self.log_manager.start_background()
        # Compacted topics: the cleaner's threads rewrite their logs (broker/log/log_cleaner.py).
        self.log_cleaner = LogCleaner(cfg.cleaner, cfg.data_dir, self.log_manager.all_logs)
        self.log_cleaner.start()

        producer_ids = ProducerIdManager(lambda: self.registry.client, cfg.broker_id)
        flusher = LogFlusher(loop, self._executor)
        # Consumer groups (Kafka's protocol): membership here in memory, committed offsets in ZooKeeper.
        self.groups = GroupCoordinator(cfg.broker_id, metadata, lambda: self.registry.client, self._executor,
                                       GroupSettings(cfg.group_min_session_timeout_ms, cfg.group_max_session_timeout_ms,
                                                     cfg.group_initial_rebalance_delay_ms, cfg.offset_metadata_max_bytes,
                                                     cfg.offsets_retention_minutes * 60_000,
                                                     cfg.offsets_retention_check_interval_ms),
                                       ConsumerGroupSettings(cfg.group_consumer_session_timeout_ms,
                                                             cfg.group_consumer_heartbeat_interval_ms))
        self.groups.start(loop)
        # Transactions (docs/transactions.md): state per transactional id in ZooKeeper, markers to every leader.
        self.transactions = TransactionCoordinator(
            cfg.broker_id, metadata, lambda: self.registry.client, self._executor, producer_ids,
            TxnMarkerWriter(cfg.broker_id, metadata, replicas, flusher, cfg.request_timeout_ms,
                            self._inter_broker_security()),
            TxnSettings(cfg.transaction_max_timeout_ms, cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms))
        self.transactions.start(loop)
        apis = KafkaApis(cfg, metadata, replicas, self.registry, producer_ids, purgatory, flusher, self._executor,
                         self.groups, self.transactions, await self._authorizer())
        # Client quotas (docs/quotas.md): every quota read before serving, then followed through /config/changes
        self.quota_cache = QuotaConfigCache(lambda: self.registry.client, apis.quotas.update)
        await loop.run_in_executor(self._executor, self.quota_cache.start)
        sasl = None
        if any(spec.uses_sasl for spec in security.listeners):  # credentials read per authentication (ZooKeeper)
            sasl = SaslServer(security.sasl, lambda user, mechanism: ScramCredentialStore(self.registry.client).get(
                user, mechanism), self._executor)
        mapper = PrincipalMapper(security.ssl.principal_mapping_rules)
        endpoints = []
        for spec, sock in self._bound:
            server = SocketServer(spec.host, spec.port, apis, cfg.max_request_bytes,
                                  max_idle_ms=cfg.connections_max_idle_ms,
                                  queued_max_request_bytes=cfg.queued_max_request_bytes,
                                  max_connections_per_ip=cfg.max_connections_per_ip,
                                  listener=sock, spec=spec, ssl_factory=self.ssl_factory, sasl=sasl,
                                  principal_mapper=mapper)
            port = server.bind()
            server.start()
            self.socket_servers.append(server)
            endpoints.append(Endpoint(spec.name, spec.security_protocol, spec.advertised_host,
                                      spec.advertised_port or port))
            log.info("broker %d listening on %s://%s:%d (advertised %s:%d)", cfg.broker_id, spec.name, spec.host,
                     port, spec.advertised_host, spec.advertised_port or port)
        self.socket_server = self.socket_servers[0]
        # host:port of the registration: the inter-broker listener's (the replica fetchers and the transaction
        # markers of the other brokers connect there); clients get their listener's from Metadata
        inter = next(e for e in endpoints if e.listener == security.inter_broker_listener)
        # What this broker runs goes into its registration too: a mixed-version cluster shows in `ferry topics
        # describe` and on the dashboard (a rolling upgrade half done, or a host left behind).
        await loop.run_in_executor(self._executor, lambda: self.registry.register_broker(
            cfg.broker_id, inter.host, inter.port, cfg.datacenter, endpoints=tuple(endpoints),
            ferry_version=release.ferry_version(), native=native.summary()))
        self.registered = True
        # Our own Metadata answers should name us as a live leader before clients are sent here.
        deadline = loop.time() + METADATA_WAIT_S
        while cfg.broker_id not in metadata.brokers and loop.time() < deadline:
            await asyncio.sleep(0.01)
        log.info("broker %d registered in ZooKeeper", cfg.broker_id)
        if cfg.audit_topic_partitions > 0 and AUDIT_TOPIC not in metadata.topics:
            await loop.run_in_executor(self._executor, self._ensure_audit_topic)
        await loop.run_in_executor(self._executor, self.controller.start)
        own = cfg.security.inter_broker_client() if cfg.security is not None else ClientConfig.plaintext()
        services = BrokerServices(cfg, loop, self._executor, self.registry, replicas, producer_ids, own, flusher)
        for plugin in self.plugins:
            await plugin.start(services)
        if cfg.metrics_port:
            serve(cfg.metrics_port, BrokerCollector(cfg.broker_id, replicas, self.controller,
                                                    offline_log_dirs=lambda: self.log_manager.health.offline_log_dirs,
                                                    requests=apis.request_metrics, extra=self.plugins,
                                                    listeners=lambda: self.socket_servers),
                  cfg.metrics_host,
                  cfg.metrics_http.security(cfg.zookeeper))
            log.info("metrics on %s://%s:%d/metrics", "https" if cfg.metrics_http.certfile else "http",
                     cfg.metrics_host, cfg.metrics_port)

    async def _authorizer(self) -> Authorizer:
        """ACLs (docs/acls.md): with authorizer.class.name set, every ACL is read before serving and followed
        through ZooKeeper's change notifications; without it, an authorizer that allows everything at once."""
        cfg = self.config.authorizer
        if not cfg.enabled:
            return Authorizer()
        self.acl_cache = AclCache(lambda: self.registry.client)
        await asyncio.get_running_loop().run_in_executor(self._executor, self.acl_cache.start)
        log.info("authorizer on (%s): %d ACL binding(s), super users %s, allow.everyone.if.no.acl.found=%s",
                 cfg.class_name, sum(map(len, self.acl_cache.snapshot.acls.values())),
                 ";".join(cfg.super_users) or "(none)", str(cfg.allow_everyone_if_no_acl_found).lower())
        return Authorizer(self.acl_cache, cfg.super_users, cfg.allow_everyone_if_no_acl_found)

    def _inter_broker_security(self) -> ClientSecurity:
        """TLS and/or SASL for this broker's connections to the others, as the inter-broker listener asks: the
        broker's own certificate, and the inter-broker SASL user (a super user once ACLs are on)."""
        security = self.config.security
        assert security is not None
        inter = security.listener(security.inter_broker_listener)
        tls = self.ssl_factory.client_context() if inter.uses_tls and self.ssl_factory is not None else None
        sasl = SaslLogin(security.sasl.inter_broker_mechanism, security.sasl.inter_broker_username,
                         security.sasl.inter_broker_password) if inter.uses_sasl else None
        return ClientSecurity(tls, sasl)

    def _ensure_audit_topic(self) -> None:
        """Create the pipeline's `_audit` topic if no broker has yet, so audit counts have somewhere to go
        from the first message on (every broker tries; the loser of the race finds it exists)."""
        try:  # default.replication.factor, but never more than the brokers registered so far
            rf = max(1, min(self.config.default_replication_factor, len(self.registry.brokers())))
            self.registry.create_topic(AUDIT_TOPIC, self.config.audit_topic_partitions, None, rf)
            log.info("created the audit topic %s with %d partition(s), replication factor %d", AUDIT_TOPIC,
                     self.config.audit_topic_partitions, rf)
        except TopicExistsError:
            pass
        except Exception as e:  # never fatal: producers keep their counts until the topic exists
            log.warning("could not create the audit topic %s: %s", AUDIT_TOPIC, e)

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships to in-sync replicas elsewhere, and wait
        (bounded) until none is left that could move: a rolling restart then loses no produce request."""
        cfg = self.config
        replicas = self.replicas
        # a broker that never registered never acted as its id: asking the controller to move "its" leaderships
        # would move a healthy namesake's (a second process started by mistake with the same --id)
        if replicas is None or self.registry is None or not cfg.controlled_shutdown_enable or not self.registered:
            return
        if not self.registry.connected or not replicas.movable_leaderships():
            return  # nothing could move (or nobody to ask): do not wait for ZooKeeper
        loop = asyncio.get_running_loop()
        try:  # the request may be there already: an offline log dir made it (log_dir_failure.py)
            await asyncio.wait_for(loop.run_in_executor(
                self._executor, request_leadership_moves, self.registry.client, cfg.broker_id),
                cfg.zk_session_timeout_s)
        except Exception as e:
            log.warning("controlled shutdown: cannot ask the controller (%s); shutting down anyway",
                        str(e) or type(e).__name__)
            return
        budget = (cfg.controlled_shutdown_max_retries + 1) * cfg.controlled_shutdown_retry_backoff_ms / 1000.0
        deadline = loop.time() + min(max(budget, 1.0), 60.0)
        while loop.time() < deadline:
            movable = replicas.movable_leaderships()
            if not movable:
                log.info("controlled shutdown: no leadership left to move")
                return
            await asyncio.sleep(0.05)
        log.warning("controlled shutdown: still leading %s after %.0f s; shutting down anyway",
                    replicas.movable_leaderships()[:10], budget)

    async def shutdown(self) -> None:
        loop = asyncio.get_running_loop()
        for plugin in self.plugins:
            try:
                await plugin.stop()
            except Exception:
                log.exception("stopping %s failed", type(plugin).__name__)
        if self.socket_server is not None:
            try:
                await self.controlled_shutdown()
            except Exception:
                log.exception("controlled shutdown failed")
        if self.groups is not None:
            self.groups.stop()  # members waiting in JoinGroup/SyncGroup are told to find the next coordinator
        if self.transactions is not None:
            await self.transactions.stop()
        if self.log_dir_failures is not None:
            await self.log_dir_failures.stop()
        if self.acl_cache is not None:
            self.acl_cache.stop()
        if self.quota_cache is not None:
            self.quota_cache.stop()
        if self.fetchers is not None:
            await self.fetchers.shutdown()
        if self.replicas is not None:
            await self.replicas.stop()
        if self.controller is not None:
            try:  # bounded: a ZooKeeper call stuck without ZooKeeper must not hold the shutdown
                await asyncio.wait_for(loop.run_in_executor(self._executor, self.controller.stop),
                                       self.config.zk_session_timeout_s)
            except Exception as e:
                log.warning("stopping the controller: %s", str(e) or type(e).__name__)
        if self.registry is not None and self.registered:
            try:
                # bounded: a ZooKeeper that went away must not keep the broker from flushing its logs
                await asyncio.wait_for(loop.run_in_executor(self._executor, self.registry.unregister_broker),
                                       self.config.zk_session_timeout_s)
            except Exception as e:
                log.warning("unregistering from ZooKeeper failed: %s", str(e) or type(e).__name__)
        for server in self.socket_servers:
            await server.stop()
        if not self.socket_servers:
            for _spec, sock in self._bound:
                sock.close()
        if self.log_cleaner is not None:  # before the logs close: a clean in progress ends its group first
            await loop.run_in_executor(self._executor, self.log_cleaner.stop)
        if self.log_manager is not None:
            await loop.run_in_executor(self._executor, self.log_manager.shutdown)
            log.info("logs flushed and closed")
        if self.registry is not None:
            connected = self.registry.connected
            try:
                await asyncio.wait_for(loop.run_in_executor(self._executor, self.registry.stop),
                                       self.config.zk_session_timeout_s + 5 if connected else 2.0)
            except Exception as e:
                log.warning("closing the ZooKeeper session failed: %s", str(e) or type(e).__name__)
        # nothing queued runs any more; a worker thread stuck in a ZooKeeper call (ZooKeeper unreachable) is
        # still joined by the interpreter at exit: `ferry broker` leaves without it (broker/cli._exit_if_stuck)
        self._executor.shutdown(wait=False, cancel_futures=True)
        log.info("broker %d stopped", self.config.broker_id)
