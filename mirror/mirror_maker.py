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
from dataclasses import dataclass

from ferry.client.audit.counter import AuditCounter
from ferry.client.audit.event import AUDIT_TOPIC
from ferry.client.audit.publisher import AuditPublisher
from ferry.client.subscription import STRATEGIES
from ferry.client.wire_client import WireClient
from ferry.mirror.metrics import MirrorMetrics
from ferry.mirror.mirror_fetcher import MirrorFetcher
from ferry.mirror.mirror_limits import COALESCE_BYTES, FETCH_WAIT_MS
from ferry.mirror.mirror_stream import MirrorStream
from ferry.mirror.partition_mirror import TopicPartition
from ferry.mirror.schema_sync import SchemaSync
from ferry.mirror.topic_sync import TopicSync
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
        if self.metrics_port is not None and not 0 <= self.metrics_port < 65536:
            raise ValueError(f"--metrics-port must be 0-65535 (got {self.metrics_port})")

    @property
    def subscription_include(self) -> str:
        """The include pattern plus `_audit` (audit events are mirrored like any topic)."""
        return f"(?:{self.include})|{re.escape(AUDIT_TOPIC)}"

    def matches(self, topic: str) -> bool:
        """The ConsumerConnector's own filter (full match; `__*` internal topics never)."""
        from ferry.client.subscription import Subscription

        return Subscription(include=self.subscription_include, exclude=self.exclude).matches(topic)


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
        self.connector = None
        self.counter = AuditCounter(AUDIT_TIER, config.application, config.datacenter or "", socket.gethostname())
        self._audit_producer = None
        self._publisher: AuditPublisher | None = None
        self._commit_lock = threading.Lock()
        self._committed: dict[TopicPartition, int] = {}
        self._audited: dict[TopicPartition, int] = {}  # offsets whose records' audit counts are published
        # partitions released with acknowledged offsets the live ZooKeeper did not take (a link cut expired
        # the session): if they come back here, copying resumes there, not at the older committed offset
        self._acked_uncommitted: dict[TopicPartition, int] = {}
        self._next_audit = 0.0
        self._stop = threading.Event()
        self._committer: threading.Thread | None = None
        self._http = None
        self.commits = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self, wait_s: float = 15.0) -> MirrorMaker:
        from ferry.client.consumer_connector import ConsumerConnector

        cfg = self.config
        self.source = ClusterRegistry(cfg.source_zookeeper).start()
        self.target = ClusterRegistry(cfg.target_zookeeper).start()
        if cfg.datacenter is None:
            dcs = {b.datacenter for b in self.target.brokers().values() if b.datacenter}
            self.counter.datacenter = sorted(dcs)[0] if dcs else ""
        if cfg.metrics_port is not None:
            self._http = self.metrics.serve(cfg.metrics_port)
        self.topic_sync = TopicSync(self.source, self.target, cfg.matches,
                                    always=(AUDIT_TOPIC,) if cfg.audit else (),
                                    replication_factor=cfg.target_replication_factor).start()
        if cfg.schemas:
            self.schema_sync = SchemaSync(self.source, self.target).start()
        self.streams = [
            MirrorStream(i, WireClient(self._brokers_of(self.source), f"{cfg.application}-live-{i}",
                                       timeout_s=cfg.live_timeout_s),
                         WireClient(self._brokers_of(self.target), f"{cfg.application}-offline-{i}",
                                    timeout_s=cfg.offline_timeout_s),
                         self.counter.count, self.metrics, cfg.fetch_wait_ms, cfg.coalesce_bytes)
            for i in range(cfg.streams)
        ]
        for s in self.streams:
            s.start()
        self.fetcher = MirrorFetcher(self.streams, self._on_partitions_stopped, self._on_partitions_started,
                                     self.resume_offsets)
        self.connector = ConsumerConnector(cfg.group, cfg.source_zookeeper, consumer_id=cfg.consumer_id,
                                           auto_offset_reset="earliest", auto_commit=False,
                                           zk_session_timeout_s=cfg.zk_session_timeout_s, fetcher=self.fetcher,
                                           assignment_strategy=cfg.assignment_strategy)
        self.connector.create_message_streams_by_filter(cfg.subscription_include, cfg.exclude, n=cfg.streams,
                                                        wait_s=wait_s)
        self._committer = threading.Thread(target=self._commit_loop, name="ferry-mirror-committer", daemon=True)
        self._committer.start()
        log.info("mirror %s: %s -> %s, topics %r (exclude %r), %d streams, %s assignment",
                 self.connector.consumer_id, cfg.source_zookeeper, cfg.target_zookeeper, cfg.include, cfg.exclude,
                 cfg.streams, cfg.assignment_strategy)
        return self

    def stop(self) -> None:
        """Clean stop: hand back partitions (committing what offline acknowledged), flush audit, close."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._committer is not None:
            self._committer.join(30)
        if self.connector is not None:
            self.connector.shutdown()  # -> fetcher.stop_fetching -> final commit, then release ownership
        for s in self.streams:
            s.stop()
        self.commit(force_audit=True)
        if self._publisher is not None:
            self._publisher.close(30)
        if self._audit_producer is not None:
            self._audit_producer.close()
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

    @staticmethod
    def _brokers_of(registry: ClusterRegistry):
        def addresses() -> list[tuple[str, int]]:
            return [(b.host, b.port) for b in registry.brokers().values()]
        return addresses

    # ------------------------------------------------------------------ commits
    def _commit_loop(self) -> None:
        while not self._stop.wait(self.config.commit_interval_s):
            try:
                self.commit()
            except Exception:
                self.metrics.error("commit")
                log.exception("mirror commit failed; will retry")

    def commit(self, force_audit: bool = False) -> dict[TopicPartition, int]:
        """Commit every stream's acknowledged offsets whose audit counts are published (if they moved).

        Audit counts go out every ``audit_interval_s`` (or at once when ``force_audit``); offsets of
        records counted since then wait for that publication, so a crash never under-counts.
        """
        with self._commit_lock:
            offsets: dict[TopicPartition, int] = {}
            hws: dict[TopicPartition, int] = {}
            for s in self.streams:
                offsets.update(s.committable())
                hws.update(s.high_watermarks())
            safe = self._audited_offsets(offsets, force_audit)
            changed = {tp: o for tp, o in safe.items() if self._committed.get(tp) != o}
            done = self._commit_offsets(changed) if changed else {}
            owned = self.owned_partitions()
            self.metrics.owned.set(len(owned))
            for tp in owned:
                committed = self._committed.get(tp)
                hw = hws.get(tp)
                if committed is not None:
                    self.metrics.committed.labels(tp[0], str(tp[1])).set(committed)
                    if hw is not None:
                        self.metrics.lag.labels(tp[0], str(tp[1])).set(max(hw - committed, 0))
            return done

    def _audited_offsets(self, offsets: dict[TopicPartition, int], force: bool) -> dict[TopicPartition, int]:
        """Of ``offsets`` (read before this call), those whose records' counts are acknowledged offline."""
        if not self.config.audit or self.counter.pending() == 0:
            self._audited.update(offsets)  # everything counted so far is published
            return dict(offsets)
        now = time.monotonic()
        if force or now >= self._next_audit:
            if self._flush_audit():
                self._next_audit = now + self.config.audit_interval_s
                self._audited.update(offsets)
                return dict(offsets)
            self.metrics.error("audit")
            self._next_audit = now + 1.0
            log.warning("audit counts not acknowledged by the offline cluster; committing only offsets "
                        "whose counts are published")
        return {tp: self._audited[tp] for tp in offsets if tp in self._audited}

    def _commit_offsets(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        connector = self.connector
        if connector is None:
            return {}
        done = connector.commit_offsets(offsets)
        self._committed.update(done)
        if done:
            self.commits += 1
        return done

    def _on_partitions_stopped(self, final: dict[TopicPartition, int]) -> None:
        """Called by the connector's thread before it releases ownership: publish, commit, forget (but
        remember acknowledged offsets the commit did not reach, for resume_offsets)."""
        with self._commit_lock:
            try:
                safe = self._audited_offsets(final, force=True)
                changed = {tp: o for tp, o in safe.items() if self._committed.get(tp) != o}
                if changed:
                    self._commit_offsets(changed)
            except Exception:
                self.metrics.error("commit")
                log.exception("final commit before releasing %d partitions failed", len(final))
            for tp, off in final.items():
                if self._committed.get(tp) != off:
                    self._acked_uncommitted[tp] = off
                    log.warning("%s-%d released with offsets up to %d copied but not committed (live ZooKeeper "
                                "unreachable?); resuming there if it comes back to this mirror", tp[0], tp[1], off)
            for tp in final:
                self._committed.pop(tp, None)
                self._audited.pop(tp, None)
                self.metrics.forget_partition(*tp)
        self.metrics.rebalances.inc()

    def resume_offsets(self, offsets: dict[TopicPartition, int | None]) -> dict[TopicPartition, int | None]:
        """Where the streams start: the committed offset, or further on for a partition this process copied
        beyond it before losing it uncommitted (the offline cluster acknowledged those records: copying them
        again would duplicate them). Another owner's later commit (a higher offset) wins."""
        out = dict(offsets)
        with self._commit_lock:
            for tp, committed in offsets.items():
                acked = self._acked_uncommitted.pop(tp, None)
                if acked is not None and (committed is None or acked > committed):
                    log.info("%s-%d: resuming at %d, copied before the partition was lost (committed: %s)",
                             tp[0], tp[1], acked, committed)
                    out[tp] = acked
        return out

    def _on_partitions_started(self, offsets: dict[TopicPartition, int | None]) -> None:
        with self._commit_lock:
            for tp, off in offsets.items():
                if off is not None:
                    self._committed[tp] = off
        log.info("mirror %s owns %d partitions", self.consumer_id, len(offsets))

    # ------------------------------------------------------------------ audit
    def _flush_audit(self, timeout: float = 15.0) -> bool:
        """Publish the mirror tier's counts and wait for the offline cluster's acknowledgement."""
        if not self.config.audit:
            return True
        if self.counter.pending() == 0:
            return True
        publisher = self._ensure_publisher()
        if publisher is None:
            return False
        before = publisher.published
        try:
            n = publisher.publish()
        except Exception as e:
            log.warning("audit publish failed: %s", e)
            return False
        undelivered = self._audit_producer.flush(timeout)
        return undelivered == 0 and publisher.published - before >= n

    def _ensure_publisher(self) -> AuditPublisher | None:
        if self._publisher is not None:
            return self._publisher
        from ferry.client.producer import Producer

        assert self.target is not None
        brokers = self.target.brokers()
        if not brokers:
            return None
        bootstrap = ",".join(b.address for b in brokers.values())
        try:
            self._audit_producer = Producer(bootstrap, application=self.config.application,
                                            datacenter=self.counter.datacenter, audit=False, linger_ms=50,
                                            compression="lz4")
        except Exception as e:
            log.warning("cannot create the audit producer yet: %s", e)
            return None
        self._publisher = AuditPublisher(self._audit_producer, self.counter, interval_s=3600.0)
        return self._publisher

