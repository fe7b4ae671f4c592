"""MirrorMaker: one mirror process (paper section 4: the offline cluster's "embedded consumers").

Wires together
* a ConsumerConnector on the LIVE ZooKeeper (round-robin by default, or Algorithm 1, over the topics
  matching the filter; several mirror processes in one group share the partitions) whose fetcher is a
  MirrorFetcher,
* N MirrorStreams moving raw record batches live -> offline (same partition number),
* TopicSync creating/growing offline topics, SchemaSync replicating the schema registry (mirrored
  messages keep their live schema ids),
* the committer: every ``commit_interval_s`` it commits the live offsets the offline cluster
  acknowledged, to the live ZooKeeper, once the audit counts of the records before them are published
  (every ``audit_interval_s``) and acknowledged too. A crash therefore replays from the last commit (duplicates, counted again: the audit shows
  them) and never loses data or audit counts.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ferry.client.audit.event import AUDIT_TOPIC
from ferry.client.bootstrap import bootstrap_string, broker_addresses
from ferry.client.consumer_connector import ConsumerConnector
from ferry.client.errors import ClientError
from ferry.client.group_registration import refuse_if_held_here
from ferry.client.subscription import STRATEGIES
from ferry.client.topic_selection import TopicFilter
from ferry.client.wire_client import WireClient
from ferry.mirror.audit_sender import AuditEventSender
from ferry.mirror.checkpoint import ZkCheckpoints
from ferry.mirror.checkpoint_keeper import CheckpointKeeper
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_fetcher import MirrorFetcher
from ferry.mirror.mirror_limits import COALESCE_BYTES, FETCH_WAIT_MS, MAX_IN_FLIGHT
from ferry.mirror.mirror_stream import MirrorStream
from ferry.mirror.partition_mirror import PartitionProgress, TopicPartition
from ferry.mirror.schema_sync import SchemaSync
from ferry.mirror.topic_sync import TopicSync
from ferry.wire import native
from ferry.wire.client_config import ClientConfig
from ferry.wire.sasl_login import AuthenticationError
from ferry.zk.cluster_registry import ClusterRegistry

log = logging.getLogger("ferry.mirror")

DEFAULT_GROUP = "ferry-mirror"
ASSIGNMENT_STRATEGIES = STRATEGIES  # ("range", "roundrobin")
DEFAULT_ASSIGNMENT_STRATEGY = "roundrobin"
AUDIT_TIER = "mirror"


@dataclass
class MirrorConfig:
    source_zookeeper: str
    target_zookeeper: str
    include: str
    exclude: str | None = None
    streams: int = 1
    group: str = DEFAULT_GROUP
    consumer_id: str | None = None
    metrics_port: int | None = None
    datacenter: str | None = None  # the offline datacenter's name, for audit events
    commit_interval_s: float = 1.0
    audit_interval_s: float = 5.0  # mirror-tier audit events per topic and bucket at most this often
    audit: bool = True
    schemas: bool = True  # keep the offline schema registry a replica of the live one
    zk_session_timeout_s: float = 6.0
    fetch_wait_ms: int = FETCH_WAIT_MS
    coalesce_bytes: int = COALESCE_BYTES  # small batches are re-built into ones of about this size; 0: never
    # batches per partition in flight to the offline cluster over several rounds (1..5: the broker dedupes 5)
    max_in_flight: int = MAX_IN_FLIGHT
    live_timeout_s: float = 15.0  # a fetch answers within its long-poll wait: silence this long = dead link
    offline_timeout_s: float = 40.0  # a produce waits for the offline fsync (request timeout 30 s)
    application: str = "ferry-mirror"
    # roundrobin deals all matching partitions over the members (many one-partition topics spread evenly;
    # range, Algorithm 1 per topic, gives each such topic to the first member). A group uses roundrobin
    # only once every member asks for it (a rolling upgrade from range stays on range until then).
    assignment_strategy: str = DEFAULT_ASSIGNMENT_STRATEGY
    # replication factor of the topics the mirror creates offline (MM2's replication.factor); None:
    # min(3, offline brokers registered when the topic is created) (topic_sync.py)
    target_replication_factor: int | None = None
    # TLS/SASL towards each side's brokers (librdkafka properties: --source-config / --target-config), each with
    # its own credentials: fetches, ListOffsets and metadata live, produces and the audit producer offline
    source_client: ClientConfig = field(default_factory=ClientConfig.plaintext)
    target_client: ClientConfig = field(default_factory=ClientConfig.plaintext)

    def validate(self) -> None:
        if self.streams < 1:
            raise ValueError(f"--streams must be at least 1 (got {self.streams})")
        for flag, pattern in (("--include", self.include), ("--exclude", self.exclude)):
            if pattern is None:
                continue
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"{flag} {pattern!r} is not a valid regular expression: {e}") from None
        if self.commit_interval_s <= 0 or self.audit_interval_s <= 0:
            raise ValueError("commit and audit intervals must be positive")
        if self.live_timeout_s <= 0 or self.offline_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        if self.assignment_strategy not in ASSIGNMENT_STRATEGIES:
            raise ValueError(f"--assignment-strategy must be one of {', '.join(ASSIGNMENT_STRATEGIES)} "
                             f"(got {self.assignment_strategy!r})")
        if self.target_replication_factor is not None and self.target_replication_factor < 1:
            raise ValueError(f"--target-replication-factor must be at least 1 (got {self.target_replication_factor})")
        if self.coalesce_bytes < 0:
            raise ValueError(f"coalesce_bytes must be 0 (off) or positive (got {self.coalesce_bytes})")
        if not 1 <= self.max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"--max-in-flight must be 1..{MAX_IN_FLIGHT} (got {self.max_in_flight}): the offline "
                             f"broker recognises a retry among a producer's last {MAX_IN_FLIGHT} batches only")
        if self.metrics_port is not None and not 0 <= self.metrics_port < 65536:
            raise ValueError(f"--metrics-port must be 0-65535 (got {self.metrics_port})")

    @property
    def subscription_include(self) -> str:
        """The include pattern plus `_audit` (audit events are mirrored like any topic)."""
        return mirrored_include(self.include)

    def topic_filter(self) -> TopicFilter:
        """What the mirror copies: the ConsumerConnector's own filter."""
        return TopicFilter(self.subscription_include, self.exclude)


def mirrored_include(include: str) -> str:
    """A mirror's include pattern: ``include`` plus `_audit`, which it names (so copies, unless excluded),
    an internal topic that no pattern selects otherwise (`topic_selection.is_internal`)."""
    return f"(?:{include})|{re.escape(AUDIT_TOPIC)}"


class MirrorStartError(RuntimeError):
    """The mirror cannot copy (a cluster's brokers do not answer): it stops before it joins the group."""


class MirrorMaker:
    def __init__(self, config: MirrorConfig) -> None:
        config.validate()
        self.config = config
        self.metrics = MirrorMetrics()
        self.source: ClusterRegistry | None = None
        self.target: ClusterRegistry | None = None
        self.topic_sync: TopicSync | None = None
        self.schema_sync: SchemaSync | None = None
        self.streams: list[MirrorStream] = []
        self.fetcher: MirrorFetcher | None = None
        self.connector: ConsumerConnector | None = None
        self.keeper: CheckpointKeeper | None = None
        self.datacenter = config.datacenter or ""
        self.audit_sender: AuditEventSender | None = None  # made once the datacenter is known (start)
        self._commit_lock = threading.Lock()  # progress taken from the streams is applied before a release
        self._next_audit = 0.0
        self._stop = threading.Event()
        self._committer: threading.Thread | None = None
        self._http = None

    # ------------------------------------------------------------------ lifecycle
    def start(self, wait_s: float = 15.0) -> MirrorMaker:
        cfg = self.config
        self.source = ClusterRegistry(cfg.source_zookeeper).start()
        self.target = ClusterRegistry(cfg.target_zookeeper).start()
        # a mirror that cannot copy must not join the group: joining makes the healthy members hand it partitions
        for side, registry, zk, client in (("live", self.source, cfg.source_zookeeper, cfg.source_client),
                                           ("offline", self.target, cfg.target_zookeeper, cfg.target_client)):
            self._check_brokers_answer(side, registry, zk, client)
        if cfg.consumer_id is not None:  # a member id another process here runs as: refused before anything else
            refuse_if_held_here(self.source.client, cfg.group, cfg.consumer_id)
        if cfg.datacenter is None:
            dcs = {b.datacenter for b in self.target.brokers().values() if b.datacenter}
            self.datacenter = sorted(dcs)[0] if dcs else ""
        if cfg.metrics_port is not None:
            self._http = self.metrics.serve(cfg.metrics_port)
        self.topic_sync = TopicSync(self.source, self.target, cfg.topic_filter().matches,
                                    always=(AUDIT_TOPIC,) if cfg.audit else (),
                                    replication_factor=cfg.target_replication_factor).start()
        if cfg.schemas:
            self.schema_sync = SchemaSync(self.source, self.target).start()
        store = ZkCheckpoints(self.source.client, cfg.group)
        self.audit_sender = AuditEventSender(self._offline_bootstrap, cfg.application, self.datacenter,
                                             client_config=cfg.target_client)
        self.keeper = CheckpointKeeper(store, cfg.group, self.audit_sender.send, self._event_fields,
                                       self.metrics.error)
        live, offline = cfg.source_client.security(), cfg.target_client.security()
        self.streams = [
            MirrorStream(i, WireClient(self._brokers_of(self.source, cfg.source_client), f"{cfg.application}-live-{i}",
                                       timeout_s=cfg.live_timeout_s, security=live),
                         WireClient(self._brokers_of(self.target, cfg.target_client),
                                    f"{cfg.application}-offline-{i}", timeout_s=cfg.offline_timeout_s,
                                    security=offline),
                         self.metrics, cfg.fetch_wait_ms, cfg.coalesce_bytes, checkpoints=store,
                         adopt=self.keeper.adopt, audit=cfg.audit,
                         max_in_flight=cfg.max_in_flight)
            for i in range(cfg.streams)
        ]
        for s in self.streams:
            s.start()
        self.fetcher = MirrorFetcher(self.streams, self._on_partitions_stopped, self._on_partitions_started)
        self.connector = ConsumerConnector(cfg.group, cfg.source_zookeeper, consumer_id=cfg.consumer_id,
                                           auto_offset_reset="earliest", auto_commit=False,
                                           zk_session_timeout_s=cfg.zk_session_timeout_s, fetcher=self.fetcher,
                                           assignment_strategy=cfg.assignment_strategy,
                                           client_config=cfg.source_client)
        self.connector.create_message_streams_by_filter(cfg.subscription_include, cfg.exclude, n=cfg.streams,
                                                        wait_s=wait_s)
        self._next_audit = time.monotonic() + cfg.audit_interval_s
        self._committer = threading.Thread(target=self._commit_loop, name="ferry-mirror-committer", daemon=True)
        self._committer.start()
        log.info("mirror %s: %s -> %s, topics %r (exclude %r), %d streams, %s assignment",
                 self.connector.consumer_id, cfg.source_zookeeper, cfg.target_zookeeper, cfg.include, cfg.exclude,
                 cfg.streams, cfg.assignment_strategy)
        native.log_parts(log)
        return self

    def stop(self) -> None:
        """Clean stop: hand back partitions (last checkpoints, their counts published), close."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._committer is not None:
            self._committer.join(30)
        if self.connector is not None:
            self.connector.shutdown()  # -> fetcher.stop_fetching -> last checkpoints, then release ownership
        for s in self.streams:
            s.stop()
        if self.audit_sender is not None:
            self.audit_sender.close()
        if self.topic_sync is not None:
            self.topic_sync.stop()
        if self.schema_sync is not None:
            self.schema_sync.stop()
        for reg in (self.source, self.target):
            if reg is not None:
                reg.stop()
        if self._http is not None:
            server, _thread = self._http
            server.shutdown()

    def __enter__(self) -> MirrorMaker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def consumer_id(self) -> str | None:
        return self.connector.consumer_id if self.connector is not None else None

    def owned_partitions(self) -> set[TopicPartition]:
        return self.fetcher.owned() if self.fetcher is not None else set()

    def _check_brokers_answer(self, side: str, registry: ClusterRegistry, zk: str, config: ClientConfig) -> None:
        """Start-up: one metadata request to the cluster's registered brokers (logged in as ``config`` says),
        before the group is joined."""
        client = WireClient(self._brokers_of(registry, config), f"{self.config.application}-start", timeout_s=10.0,
                            security=config.security())
        try:
            client.refresh_metadata([])
        except AuthenticationError as e:
            raise MirrorStartError(f"the {side} cluster ({zk}) refused the mirror's login: {e}; "
                                   f"not joining group {self.config.group!r}") from None
        except ClientError as e:
            raise MirrorStartError(f"the {side} cluster's brokers ({zk}) do not answer: {e}; "
                                   f"not joining group {self.config.group!r}") from None
        finally:
            client.close()

    @staticmethod
    def _brokers_of(registry: ClusterRegistry, config: ClientConfig) -> Callable[[], list[tuple[str, int]]]:
        """The registered brokers' listeners of ``config``'s security.protocol, read again at each call."""
        def addresses() -> list[tuple[str, int]]:
            return broker_addresses(registry.brokers(), config.security_protocol)
        return addresses

    # ------------------------------------------------------------------ checkpoints
    def _commit_loop(self) -> None:
        while not self._stop.wait(self.config.commit_interval_s):
            try:
                self.commit()
            except Exception:
                self.metrics.error("commit")
                log.exception("mirror commit failed; will retry")

    def commit(self, force_audit: bool = False) -> None:
        """Checkpoint every stream's progress; publish the audit counts when they are due (or ``force_audit``)."""
        if self.keeper is None:
            return
        now = time.monotonic()
        audit_due = force_audit or now >= self._next_audit
        with self._commit_lock:
            progress: dict[TopicPartition, PartitionProgress] = {}
            hws: dict[TopicPartition, int] = {}
            for s in self.streams:
                progress.update(s.take_progress())
                hws.update(s.high_watermarks())
            conflicts = self.keeper.commit(progress, audit_due)
        if audit_due:
            self._next_audit = now + self.config.audit_interval_s
        for s in self.streams:
            s.resync(conflicts)
        owned = self.owned_partitions()
        self.metrics.owned.set(len(owned))
        committed = self.keeper.committed()
        for tp in owned:
            off, hw = committed.get(tp), hws.get(tp)
            if off is not None:
                self.metrics.committed.labels(tp[0], str(tp[1])).set(off)
                if hw is not None:
                    self.metrics.lag.labels(tp[0], str(tp[1])).set(max(hw - off, 0))

    def _on_partitions_stopped(self, final: dict[TopicPartition, PartitionProgress]) -> None:
        """Called by the connector's thread before it releases ownership: last checkpoints, counts published.
        If that fails (ZooKeeper unreachable) nothing is lost: the next owner syncs from the offline log."""
        assert self.keeper is not None
        with self._commit_lock:
            try:
                self.keeper.release(final)
            except Exception:
                self.metrics.error("commit")
                log.exception("last checkpoints before releasing %d partitions failed", len(final))
                self.keeper.forget(final)
        for tp in final:
            self.metrics.forget_partition(*tp)
        self.metrics.rebalances.inc()

    def _on_partitions_started(self, offsets: dict[TopicPartition, int | None]) -> None:
        log.info("mirror %s owns %d partitions", self.consumer_id, len(offsets))

    # ------------------------------------------------------------------ audit
    def _event_fields(self) -> dict:
        return {"host": socket.gethostname(), "datacenter": self.datacenter, "application": self.config.application}

    def _offline_bootstrap(self) -> str:
        assert self.target is not None
        return bootstrap_string(self.target.brokers(), self.config.target_client.security_protocol)
