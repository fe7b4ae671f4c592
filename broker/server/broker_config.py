"""BrokerConfig: everything a broker process needs, from CLI flags or a Kafka-style properties file.

Flags override the file. Every value is checked here so that a typo stops the broker at start-up with a
message naming the setting (exit code 2), not with a stack trace minutes later.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ferry.broker.log.log_cleaner import CLEANER_KEYS, CleanerConfig
from ferry.broker.server.authorizer_config import AUTHORIZER_KEYS, AuthorizerConfig
from ferry.broker.server.config_values import (
    ConfigError,
    check_port,
    parse_bool,
    parse_int,
    parse_positive_ms,
)
from ferry.broker.server.metrics_http import METRICS_HTTP_KEYS, MetricsHttpSettings
from ferry.broker.server.security_config import SECURITY_KEYS, Listener, SecurityConfig, SecurityConfigError
from ferry.wire.log_config import BOOL_SETTINGS, BROKER_CONFIG_NAMES, LogConfig, parse_setting
from ferry.wire.properties_file import parse_properties
from ferry.zk.cli_args import parse_listen
from ferry.zk.zk_tls import ZK_TLS_KEYS, ZkTlsConfig

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int
    listen_host: str
    listen_port: int
    data_dir: Path
    zookeeper: str
    datacenter: str
    advertised_host: str = ""
    advertised_port: int = 0
    log: LogConfig = field(default_factory=LogConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)  # log.cleaner.* (broker/log/log_cleaner.py)
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    auto_create_topics: bool = False
    num_partitions: int = 1
    zk_session_timeout_s: float = 10.0
    retention_check_interval_ms: int = 300_000
    connections_max_idle_ms: int = 600_000
    audit_topic_partitions: int = 0  # >0: create `_audit` with this many partitions at start-up if missing
    metrics_port: int = 0  # >0: serve Prometheus metrics on <metrics_host>:<port>/metrics
    metrics_host: str = "127.0.0.1"  # metrics.listen HOST:PORT sets both (loopback unless asked)
    metrics_http: MetricsHttpSettings = MetricsHttpSettings()  # HTTPS and authentication of /metrics
    # replication (Kafka's names and defaults; min.insync.replicas and unclean.leader.election.enable are
    # the topics' defaults, so they live in `log` (LogConfig): see the properties below)
    default_replication_factor: int = 1  # auto-created topics, CreateTopics with -1, `_audit`
    replica_lag_time_max_ms: int = 30_000  # a follower not caught up for this long leaves the ISR
    replica_fetch_wait_max_ms: int = 500  # a follower's Fetch max_wait
    replica_fetch_max_bytes: int = 1_048_576  # a follower's Fetch max bytes per partition
    replica_fetch_min_bytes: int = 1  # a follower's Fetch min_bytes
    replica_socket_timeout_ms: int = 30_000  # a follower's socket timeout towards the leader
    auto_leader_rebalance_enable: bool = True  # the controller moves leadership back to preferred leaders
    leader_imbalance_check_interval_seconds: int = 300  # how often it looks
    controlled_shutdown_enable: bool = True  # SIGTERM moves this broker's leaderships off first
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5_000
    # how a new follower finds where its log diverges: "leader-epoch" (KIP-101, the only safe choice) or
    # "high-watermark" (Kafka before 0.11; kept only so tests can show the anomalies it causes)
    replica_truncation: str = "leader-epoch"
    request_timeout_ms: int = 30_000  # upper bound of an acks=-1 produce's wait (the request's timeout is capped)
    # the group coordinator (docs/groups.md; Kafka's names and defaults)
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000  # a new group waits this long for more members to join
    offset_metadata_max_bytes: int = 4_096
    group_consumer_session_timeout_ms: int = 45_000  # KIP-848 groups: a silent member is removed after this
    group_consumer_heartbeat_interval_ms: int = 5_000  # KIP-848 groups: members heartbeat this often
    offsets_retention_minutes: int = 7 * 24 * 60  # an empty group's offsets expire after this (KIP-211)
    offsets_retention_check_interval_ms: int = 600_000
    # resource limits (docs/scale.md): no single client or request can take the broker past them
    queued_max_request_bytes: int = 256 * 1024 * 1024  # bytes of large requests being received at once (pool)
    max_connections_per_ip: int = 0  # connections from one client address (0: no limit, Kafka's default)
    fetch_wait_max_ms: int = 30_000  # the longest a Fetch may be parked, whatever its max_wait_ms asks
    max_broker_partitions: int = 10_000  # partition replicas one broker may hold; CreateTopics past it: 44
    quota_window_num: int = 11  # client quotas (docs/quotas.md): rates are measured over this many windows
    quota_window_size_seconds: int = 1  # of this length
    # the transaction coordinator (docs/transactions.md; Kafka's names and defaults)
    transaction_max_timeout_ms: int = 900_000  # the largest transaction.timeout.ms a producer may ask for
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000  # how often timeouts are checked
    authorizer: AuthorizerConfig = AuthorizerConfig()  # ACLs (docs/acls.md): authorizer.class.name, super.users
    # listeners, TLS and SASL (docs/security.md); None: one PLAINTEXT listener on listen_host:listen_port
    security: SecurityConfig | None = None
    zk_tls: ZkTlsConfig | None = None  # zookeeper.ssl.* (KIP-515): how this broker reaches ZooKeeper

    def __post_init__(self) -> None:
        if self.broker_id < 0 or self.broker_id > 0x7FFFFFFF:
            raise ConfigError(f"broker.id: {self.broker_id} is out of range (0..2147483647)")
        check_port("listeners", self.listen_port, allow_zero=True)
        if not self.advertised_host:
            host = self.listen_host
            if host in ("", "0.0.0.0", "::"):
                raise ConfigError("advertised.listeners: required when listening on a wildcard address")
            object.__setattr__(self, "advertised_host", host)
        if not self.advertised_port:
            object.__setattr__(self, "advertised_port", self.listen_port)
        check_port("advertised.listeners", self.advertised_port, allow_zero=True)
        if self.security is None:
            object.__setattr__(self, "security", SecurityConfig((Listener(
                "PLAINTEXT", "PLAINTEXT", self.listen_host, self.listen_port, self.advertised_host,
                self.advertised_port),)))
        if self.max_request_bytes < 1024:
            raise ConfigError(f"socket.request.max.bytes: {self.max_request_bytes} is too small (minimum 1024)")
        if not 0 <= self.metrics_port < 65536:
            raise ConfigError(f"metrics.port: {self.metrics_port} must be 0 (off) or a port number")
        if self.audit_topic_partitions < 0:
            raise ConfigError(f"audit.topic.partitions: {self.audit_topic_partitions} must be 0 (never create "
                              "_audit) or more")
        if self.num_partitions < 1:
            raise ConfigError(f"num.partitions: {self.num_partitions} must be at least 1")
        self._check_replication()
        if not self.zookeeper:
            raise ConfigError("zookeeper.connect: required")
        if not self.datacenter:
            raise ConfigError("datacenter: required")

    def _check_replication(self) -> None:
        for key, value, low in (
            ("default.replication.factor", self.default_replication_factor, 1),
            ("replica.lag.time.max.ms", self.replica_lag_time_max_ms, 1),
            ("replica.fetch.wait.max.ms", self.replica_fetch_wait_max_ms, 0),
            ("replica.fetch.max.bytes", self.replica_fetch_max_bytes, 0),
            ("replica.fetch.min.bytes", self.replica_fetch_min_bytes, 0),
            ("replica.socket.timeout.ms", self.replica_socket_timeout_ms, 1),
            ("leader.imbalance.check.interval.seconds", self.leader_imbalance_check_interval_seconds, 1),
            ("controlled.shutdown.max.retries", self.controlled_shutdown_max_retries, 0),
            ("controlled.shutdown.retry.backoff.ms", self.controlled_shutdown_retry_backoff_ms, 0),
            ("request.timeout.ms", self.request_timeout_ms, 1),
            ("group.min.session.timeout.ms", self.group_min_session_timeout_ms, 1),
            ("group.initial.rebalance.delay.ms", self.group_initial_rebalance_delay_ms, 0),
            ("offset.metadata.max.bytes", self.offset_metadata_max_bytes, 0),
            ("group.max.session.timeout.ms", self.group_max_session_timeout_ms, self.group_min_session_timeout_ms),
            ("group.consumer.heartbeat.interval.ms", self.group_consumer_heartbeat_interval_ms, 1),
            ("group.consumer.session.timeout.ms", self.group_consumer_session_timeout_ms,
             self.group_consumer_heartbeat_interval_ms + 1),
            ("offsets.retention.minutes", self.offsets_retention_minutes, 1),
            ("offsets.retention.check.interval.ms", self.offsets_retention_check_interval_ms, 1),
            ("queued.max.request.bytes", self.queued_max_request_bytes, 0),
            ("max.connections.per.ip", self.max_connections_per_ip, 0),
            ("fetch.wait.max.ms", self.fetch_wait_max_ms, 0), ("max.broker.partitions", self.max_broker_partitions, 0),
            ("quota.window.num", self.quota_window_num, 1), ("quota.window.size.seconds", self.quota_window_size_seconds, 1),
            ("transaction.max.timeout.ms", self.transaction_max_timeout_ms, 1),
            ("transaction.abort.timed.out.transaction.cleanup.interval.ms",
             self.transaction_abort_timed_out_transaction_cleanup_interval_ms, 1),
        ):
            if value < low:
                raise ConfigError(f"{key}: {value} must be at least {low}")
        # Kafka's own consistency checks (KafkaConfig): a follower's long poll must not time out its
        # socket, nor last long enough to drop it from the ISR.
        if self.replica_truncation not in ("leader-epoch", "high-watermark"):
            raise ConfigError(f"replica.truncation: {self.replica_truncation!r} must be leader-epoch or "
                              "high-watermark")
        if self.replica_fetch_wait_max_ms > self.replica_socket_timeout_ms:
            raise ConfigError(f"replica.socket.timeout.ms ({self.replica_socket_timeout_ms}) must be at least "
                              f"replica.fetch.wait.max.ms ({self.replica_fetch_wait_max_ms})")
        if self.replica_fetch_wait_max_ms > self.replica_lag_time_max_ms:
            raise ConfigError(f"replica.fetch.wait.max.ms ({self.replica_fetch_wait_max_ms}) must be at most "
                              f"replica.lag.time.max.ms ({self.replica_lag_time_max_ms})")

    @property
    def min_insync_replicas(self) -> int:
        """The broker's min.insync.replicas (a topic's config may override it: LogConfig.from_topic_config)."""
        return self.log.min_insync_replicas

    @property
    def unclean_leader_election_enable(self) -> bool:
        """The broker's unclean.leader.election.enable (a topic's config may override it)."""
        return self.log.unclean_leader_election_enable

    @property
    def listen(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    @property
    def advertised(self) -> str:
        return f"{self.advertised_host}:{self.advertised_port}"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        """Build from Kafka-style keys (broker.id, listeners, log.dirs, zookeeper.connect, log.segment.bytes...)."""
        p = {k.strip(): v.strip() for k, v in props.items()}
        unknown = sorted(set(p) - KNOWN_KEYS)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)} (known: {', '.join(sorted(KNOWN_KEYS))})")
        missing = [k for k in ("broker.id", "listeners", "log.dirs", "zookeeper.connect", "datacenter")
                   if not p.get(k) and not (k == "log.dirs" and p.get("log.dir"))]
        if missing:
            raise ConfigError(f"missing required setting(s): {', '.join(missing)}")
        try:
            security = SecurityConfig.from_properties(p)
        except SecurityConfigError as e:
            raise ConfigError(str(e)) from None
        first = security.listeners[0]  # the broker's primary address (logs, the id-holder probe)
        host, port, adv_host, adv_port = first.host, first.port, first.advertised_host, first.advertised_port
        log_changes: dict[str, object] = {}
        for key, attr in BROKER_CONFIG_NAMES.items():
            if key in p:
                log_changes[attr] = _parse_log_setting(attr, key, p[key])
        if "log.retention.hours" in p and "log.retention.ms" not in p:
            log_changes["retention_ms"] = parse_int("log.retention.hours", p["log.retention.hours"]) * 3600_000
        try:
            log_config = dataclasses.replace(LogConfig(), **log_changes)
        except ValueError as e:
            raise ConfigError(f"log settings: {e}") from None
        try:
            cleaner = CleanerConfig.from_properties(p)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        data_dir = p.get("log.dirs") or p["log.dir"]
        if "," in data_dir:
            raise ConfigError(f"log.dirs: one directory only, got {data_dir!r}")
        return cls(
            broker_id=parse_int("broker.id", p["broker.id"]),
            listen_host=host,
            listen_port=port,
            data_dir=Path(data_dir),
            zookeeper=p["zookeeper.connect"],
            datacenter=p["datacenter"],
            advertised_host=adv_host,
            advertised_port=adv_port,
            log=log_config,
            cleaner=cleaner,
            max_request_bytes=parse_int("socket.request.max.bytes",
                                         p.get("socket.request.max.bytes", str(DEFAULT_MAX_REQUEST_BYTES))),
            auto_create_topics=parse_bool("auto.create.topics.enable", p.get("auto.create.topics.enable", "false")),
            num_partitions=parse_int("num.partitions", p.get("num.partitions", "1")),
            zk_session_timeout_s=parse_int("zookeeper.session.timeout.ms",
                                            p.get("zookeeper.session.timeout.ms", "10000")) / 1000.0,
            retention_check_interval_ms=parse_positive_ms("log.retention.check.interval.ms",
                                                  p.get("log.retention.check.interval.ms", "300000")),
            connections_max_idle_ms=parse_positive_ms("connections.max.idle.ms", p.get("connections.max.idle.ms", "600000")),
            audit_topic_partitions=parse_int("audit.topic.partitions", p.get("audit.topic.partitions", "0")),
            security=security,
            zk_tls=ZkTlsConfig.from_properties(dict(p), source="zookeeper.ssl settings"),  # a ValueError: exit 2
            **_metrics_listen(p),
            metrics_http=_metrics_http(p),
            **_replication_settings(p),
            authorizer=AuthorizerConfig.from_properties(p),
        )


def _parse_log_setting(attr: str, key: str, text: str) -> object:
    """A log setting from the properties (booleans also as 1/0, yes/no, like the broker's other switches)."""
    if attr in BOOL_SETTINGS:
        return parse_bool(key, text)
    try:
        return parse_setting(attr, key, text)
    except ValueError as e:
        raise ConfigError(str(e)) from None


# Kafka broker-config key -> BrokerConfig attribute (replication; integers unless listed in _BOOL_KEYS).
REPLICATION_KEYS: dict[str, str] = {
    "default.replication.factor": "default_replication_factor",
    "replica.lag.time.max.ms": "replica_lag_time_max_ms",
    "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
    "replica.fetch.max.bytes": "replica_fetch_max_bytes",
    "replica.fetch.min.bytes": "replica_fetch_min_bytes",
    "replica.socket.timeout.ms": "replica_socket_timeout_ms",
    "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
    "leader.imbalance.check.interval.seconds": "leader_imbalance_check_interval_seconds",
    "controlled.shutdown.enable": "controlled_shutdown_enable",
    "controlled.shutdown.max.retries": "controlled_shutdown_max_retries",
    "controlled.shutdown.retry.backoff.ms": "controlled_shutdown_retry_backoff_ms",
    "request.timeout.ms": "request_timeout_ms",
    "group.min.session.timeout.ms": "group_min_session_timeout_ms",
    "group.max.session.timeout.ms": "group_max_session_timeout_ms",
    "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
    "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    "group.consumer.session.timeout.ms": "group_consumer_session_timeout_ms",
    "group.consumer.heartbeat.interval.ms": "group_consumer_heartbeat_interval_ms",
    "offsets.retention.minutes": "offsets_retention_minutes",
    "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
    "queued.max.request.bytes": "queued_max_request_bytes",
    "max.connections.per.ip": "max_connections_per_ip",
    "fetch.wait.max.ms": "fetch_wait_max_ms",
    "max.broker.partitions": "max_broker_partitions",
    "quota.window.num": "quota_window_num", "quota.window.size.seconds": "quota_window_size_seconds",
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
}
_BOOL_KEYS = {"auto.leader.rebalance.enable", "controlled.shutdown.enable"}


def _replication_settings(p: Mapping[str, str]) -> dict[str, object]:
    """The replication settings present in ``p``, parsed (the dataclass holds the defaults)."""
    out: dict[str, object] = {}
    for key, attr in REPLICATION_KEYS.items():
        if key in p:
            out[attr] = parse_bool(key, p[key]) if key in _BOOL_KEYS else parse_int(key, p[key])
    if "replica.truncation" in p:
        out["replica_truncation"] = p["replica.truncation"]
    return out


KNOWN_KEYS = {
    "broker.id", "listeners", "advertised.listeners", "log.dirs", "log.dir", "zookeeper.connect", "datacenter",
    "broker.rack", "socket.request.max.bytes", "auto.create.topics.enable", "num.partitions",
    "zookeeper.session.timeout.ms", "log.retention.hours", "log.retention.check.interval.ms",
    "connections.max.idle.ms", "audit.topic.partitions", "replica.truncation", "metrics.port", "metrics.listen",
    *METRICS_HTTP_KEYS, *CLEANER_KEYS, *BROKER_CONFIG_NAMES, *REPLICATION_KEYS, *AUTHORIZER_KEYS, *SECURITY_KEYS, *ZK_TLS_KEYS,
}


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java-style properties file (wire/properties_file.py); an unreadable one raises its OSError (not a setting's)."""
    try:
        props = parse_properties(Path(path).read_text(encoding="utf-8"), str(path))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if "broker.rack" in props:
        props["datacenter"] = props.pop("broker.rack")
    return props


def _metrics_http(p: dict[str, str]) -> MetricsHttpSettings:
    try:
        return MetricsHttpSettings.from_properties(p)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _metrics_listen(p: dict[str, str]) -> dict[str, object]:
    """metrics.listen HOST:PORT (ferry's) wins over metrics.port (loopback) when both are set."""
    listen = p.get("metrics.listen")
    if not listen:
        return {"metrics_port": parse_int("metrics.port", p.get("metrics.port", "0"))}
    try:
        host, port = parse_listen(listen, "metrics.listen")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return {"metrics_port": port, "metrics_host": host}
