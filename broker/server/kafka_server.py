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

from ferry.broker.log.log_manager import LogManager
from ferry.broker.server.broker_config import BrokerConfig
from ferry.broker.server.broker_metrics import BrokerCollector, serve
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
from ferry.broker.server.socket_server import SocketServer, bind_listener
from ferry.broker.server.topic_deletion import TopicDeletion
from ferry.broker.server.transaction_coordinator import TransactionCoordinator, TxnSettings
from ferry.broker.server.transaction_markers import TxnMarkerWriter
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.errors import TopicExistsError
from ferry.zk.partition_state_watcher import PartitionStateWatcher
from ferry.zk.topic_name import AUDIT_TOPIC
from ferry.zk.znodes import BrokerInfo

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
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.log_manager: LogManager | None = None
        self.registry: ClusterRegistry | None = None
        self.socket_server: SocketServer | None = None
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
        loop = asyncio.get_running_loop()
        listener = bind_listener(cfg.listen_host, cfg.listen_port)
        self._listener = listener
        log.info("broker %d starting: data dir %s, zookeeper %s, datacenter %s", cfg.broker_id, cfg.data_dir,
                 cfg.zookeeper, cfg.datacenter)
        self.registry = ClusterRegistry(cfg.zookeeper, timeout=cfg.zk_session_timeout_s)
        await loop.run_in_executor(self._executor, self.registry.start)
        adv_port = cfg.advertised_port or listener.getsockname()[1]
        await loop.run_in_executor(self._executor, self.registry.ensure_broker_id_free, cfg.broker_id,
                                   cfg.advertised_host, adv_port, _answers)
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
            truncation=cfg.replica_truncation))
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

        producer_ids = ProducerIdManager(lambda: self.registry.client, cfg.broker_id)
        flusher = LogFlusher(loop, self._executor)
        # Consumer groups (Kafka's protocol): membership here in memory, committed offsets in ZooKeeper.
        self.groups = GroupCoordinator(cfg.broker_id, metadata, lambda: self.registry.client, self._executor,
                                       GroupSettings(cfg.group_min_session_timeout_ms, cfg.group_max_session_timeout_ms,
                                                     cfg.group_initial_rebalance_delay_ms, cfg.offset_metadata_max_bytes))
        self.groups.start(loop)
        # Transactions (docs/transactions.md): state per transactional id in ZooKeeper, markers to every leader.
        self.transactions = TransactionCoordinator(
            cfg.broker_id, metadata, lambda: self.registry.client, self._executor, producer_ids,
            TxnMarkerWriter(cfg.broker_id, metadata, replicas, flusher, cfg.request_timeout_ms),
            TxnSettings(cfg.transaction_max_timeout_ms, cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms))
        self.transactions.start(loop)
        apis = KafkaApis(cfg, metadata, replicas, self.registry, producer_ids, purgatory, flusher, self._executor,
                         self.groups, self.transactions)
        self.socket_server = SocketServer(cfg.listen_host, cfg.listen_port, apis, cfg.max_request_bytes,
                                          max_idle_ms=cfg.connections_max_idle_ms,
                                          queued_max_request_bytes=cfg.queued_max_request_bytes,
                                          max_connections_per_ip=cfg.max_connections_per_ip,
                                          listener=listener)
        port = self.socket_server.bind()
        self.socket_server.start()
        log.info("broker %d listening on %s:%d (advertised %s:%d)", cfg.broker_id, cfg.listen_host, port,
                 cfg.advertised_host, adv_port)
        await loop.run_in_executor(self._executor, self.registry.register_broker, cfg.broker_id,
                                   cfg.advertised_host, adv_port, cfg.datacenter)
        self.registered = True
        # Our own Metadata answers should name us as a live leader before clients are sent here.
        deadline = loop.time() + METADATA_WAIT_S
        while cfg.broker_id not in metadata.brokers and loop.time() < deadline:
            await asyncio.sleep(0.01)
        log.info("broker %d registered in ZooKeeper", cfg.broker_id)
        if cfg.audit_topic_partitions > 0 and AUDIT_TOPIC not in metadata.topics:
            await loop.run_in_executor(self._executor, self._ensure_audit_topic)
        await loop.run_in_executor(self._executor, self.controller.start)
        if cfg.metrics_port:
            serve(cfg.metrics_port, BrokerCollector(cfg.broker_id, replicas, self.controller,
                                                    offline_log_dirs=lambda: self.log_manager.health.offline_log_dirs,
                                                    requests=apis.request_metrics), cfg.metrics_host)
            log.info("metrics on %s:%d/metrics", cfg.metrics_host, cfg.metrics_port)

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
        if self.socket_server is not None:
            await self.socket_server.stop()
        elif self._listener is not None:
            self._listener.close()
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
