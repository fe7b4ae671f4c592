"""Per-partition log settings, with Kafka's topic-config names.

Topic configs arrive as strings (from ZooKeeper or CreateTopics); ``from_topic_config`` parses
the names the log understands and ignores the others (they belong to other layers or are not
implemented) so a client's usual topic configs are accepted. ``cleanup.policy`` and the compaction
settings (Kafka's names) are the log cleaner's (broker/log/log_cleaner.py). The two per-topic replication
settings (``min.insync.replicas``, ``unclean.leader.election.enable``) live here too, as in Kafka's
LogConfig: the broker's settings of the same names are their defaults, a topic's config overrides them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from ferry.wire.record.compression import COMPRESSION_NAMES, LEVELS, PRODUCER, Codec, parse_compression_type

DAY_MS = 24 * 3600 * 1000
MAX_SEGMENT_BYTES = 0x7FFFFFFF  # file positions in the offset index are u32; Kafka caps at Int.MaxValue


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * DAY_MS
    retention_ms: int = 7 * DAY_MS  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    index_interval_bytes: int = 4096
    max_index_bytes: int = 10 * 1024 * 1024
    flush_interval_messages: int = 10_000
    flush_interval_ms: int = 200
    max_message_bytes: int = 1_048_588
    consumers_see_unflushed: bool = False
    file_delete_delay_ms: int = 60_000  # deleted segments stay open this long (sendfile in flight)
    producer_id_expiration_ms: int = DAY_MS  # idempotence state of a producer silent this long is dropped
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime: the broker stamps each batch
    compression: int = PRODUCER  # compression.type: PRODUCER keeps the producer's codec, else a Codec
    compression_gzip_level: int = LEVELS[Codec.GZIP][2]
    compression_lz4_level: int = LEVELS[Codec.LZ4][2]
    compression_zstd_level: int = LEVELS[Codec.ZSTD][2]
    # replication (the broker's defaults are its own settings of the same names)
    min_insync_replicas: int = 1  # acks=-1 needs at least this many replicas in the ISR
    unclean_leader_election_enable: bool = False  # may a replica outside the ISR become leader (losing data)
    # compaction (broker/log/log_cleaner.py; Kafka's names and defaults)
    cleanup_policy: str = "delete"  # delete, compact, or compact,delete (both)
    min_cleanable_dirty_ratio: float = 0.5  # a log is cleaned once this share of its cleanable bytes is dirty
    min_compaction_lag_ms: int = 0  # a record stays uncompacted at least this long
    max_compaction_lag_ms: int = (1 << 63) - 1  # a dirty record is compacted within this long, whatever the ratio
    delete_retention_ms: int = DAY_MS  # how long a tombstone (and a transaction marker) outlives its cleaning

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts the log (a string compare: append_batch asks on every produce)."""
        return self.cleanup_policy != "delete"  # canonical spellings only (__post_init__)

    @property
    def delete(self) -> bool:
        """Whether retention (time and size) deletes old segments."""
        return self.cleanup_policy != "compact"

    @property
    def compression_level(self) -> int | None:
        """The level of the topic's codec (None: the codec has none)."""
        return {Codec.GZIP: self.compression_gzip_level, Codec.LZ4: self.compression_lz4_level,
                Codec.ZSTD: self.compression_zstd_level}.get(self.compression)

    @property
    def compression_type(self) -> str:
        return COMPRESSION_NAMES[self.compression]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            name = _ATTR_TO_NAME.get(f.name, f.name)
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise ValueError(f"{name}: expected true or false, got {value!r}")
                continue
            if f.name == "cleanup_policy":
                object.__setattr__(self, f.name, parse_cleanup_policy(name, value))  # "delete,compact" too
                continue
            if f.name == "min_cleanable_dirty_ratio":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                    raise ValueError(f"{name}: {value!r} is out of range (must be between 0 and 1)")
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name}: expected an integer, got {value!r}")
            low, high = _BOUNDS[f.name]
            if value < low or (high is not None and value > high):
                upper = f" and at most {high}" if high is not None else ""
                raise ValueError(f"{name}: {value} is out of range (must be at least {low}{upper})")

    @classmethod
    def from_topic_config(
        cls, config: Mapping[str, str] | None, defaults: LogConfig | None = None
    ) -> LogConfig:
        """Overlay Kafka-named topic settings (``retention.ms`` ...) on ``defaults``.

        Raises ValueError naming the setting when a value is not a number or out of range.
        """
        base = defaults if defaults is not None else cls()
        if not config:
            return base
        changes: dict[str, object] = {}
        for name, raw in config.items():
            attr = TOPIC_CONFIG_NAMES.get(name)
            if attr is not None:
                changes[attr] = parse_setting(attr, name, str(raw))
        return dataclasses.replace(base, **changes)


# The log's settings under Kafka's names: (LogConfig attribute, topic-config name or None for a broker-only
# setting, the broker setting that is the topics' default: Kafka's ServerTopicConfigSynonyms). The one map
# of these names: the topic config, the broker's properties and DescribeConfigs all read it.
LOG_SETTINGS: tuple[tuple[str, str | None, str], ...] = (
    ("segment_bytes", "segment.bytes", "log.segment.bytes"),
    ("segment_ms", "segment.ms", "log.roll.ms"),
    ("retention_ms", "retention.ms", "log.retention.ms"),
    ("retention_bytes", "retention.bytes", "log.retention.bytes"),
    ("index_interval_bytes", "index.interval.bytes", "log.index.interval.bytes"),
    ("max_index_bytes", "segment.index.bytes", "log.index.size.max.bytes"),
    ("flush_interval_messages", "flush.messages", "log.flush.interval.messages"),
    ("flush_interval_ms", "flush.ms", "log.flush.interval.ms"),
    ("max_message_bytes", "max.message.bytes", "message.max.bytes"),
    ("file_delete_delay_ms", "file.delete.delay.ms", "log.segment.delete.delay.ms"),
    ("consumers_see_unflushed", "consumers.see.unflushed", "log.consumers.see.unflushed"),  # ferry's own
    ("producer_id_expiration_ms", None, "producer.id.expiration.ms"),
    ("log_append_time", "message.timestamp.type", "log.message.timestamp.type"),
    ("compression", "compression.type", "compression.type"),
    ("compression_gzip_level", "compression.gzip.level", "compression.gzip.level"),
    ("compression_lz4_level", "compression.lz4.level", "compression.lz4.level"),
    ("compression_zstd_level", "compression.zstd.level", "compression.zstd.level"),
    ("min_insync_replicas", "min.insync.replicas", "min.insync.replicas"),
    ("unclean_leader_election_enable", "unclean.leader.election.enable", "unclean.leader.election.enable"),
    ("cleanup_policy", "cleanup.policy", "log.cleanup.policy"),
    ("min_cleanable_dirty_ratio", "min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio"),
    ("min_compaction_lag_ms", "min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms"),
    ("max_compaction_lag_ms", "max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
    ("delete_retention_ms", "delete.retention.ms", "log.cleaner.delete.retention.ms"),
)
# Kafka topic-config name -> LogConfig attribute.
TOPIC_CONFIG_NAMES: dict[str, str] = {topic: attr for attr, topic, _ in LOG_SETTINGS if topic is not None}
# Kafka broker-config key -> LogConfig attribute.
BROKER_CONFIG_NAMES: dict[str, str] = {broker: attr for attr, _, broker in LOG_SETTINGS}
BOOL_SETTINGS = frozenset({"consumers_see_unflushed", "unclean_leader_election_enable"})

TIMESTAMP_TYPES = {"CreateTime": False, "LogAppendTime": True}


def parse_timestamp_type(name: str, text: str) -> bool:
    """message.timestamp.type: CreateTime (the producer's timestamps, the default) or LogAppendTime."""
    value = TIMESTAMP_TYPES.get(text.strip())
    if value is None:
        raise ValueError(f"{name}: expected CreateTime or LogAppendTime, got {text!r}")
    return value


CLEANUP_POLICIES = ("delete", "compact")


def parse_cleanup_policy(name: str, text: str) -> str:
    """cleanup.policy: delete, compact or both (comma-separated, Kafka's list form); the canonical spelling."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or any(p not in CLEANUP_POLICIES for p in parts):
        raise ValueError(f"{name}: expected delete, compact or compact,delete, got {text!r}")
    return ",".join(p for p in ("compact", "delete") if p in parts)


def parse_setting(attr: str, name: str, raw: str) -> int | bool | float | str:
    """The value of LogConfig attribute ``attr`` from its config string; ValueError naming the setting ``name``."""
    text = raw.strip()
    if attr in BOOL_SETTINGS:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{name}: expected true or false, got {raw!r}")
        return text.lower() == "true"
    if attr == "log_append_time":
        return parse_timestamp_type(name, text)
    if attr == "compression":
        return parse_compression_type(name, text)
    if attr == "cleanup_policy":
        return parse_cleanup_policy(name, text)
    if attr == "min_cleanable_dirty_ratio":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{name}: expected a number between 0 and 1, got {raw!r}") from None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {raw!r}") from None


_ATTR_TO_NAME = {attr: topic or broker for attr, topic, broker in LOG_SETTINGS}  # the name errors quote

# attribute -> (minimum, maximum or None)
_BOUNDS: dict[str, tuple[int, int | None]] = {
    "segment_bytes": (14, MAX_SEGMENT_BYTES),
    "segment_ms": (1, None),
    "retention_ms": (-1, None),
    "retention_bytes": (-1, None),
    "index_interval_bytes": (0, None),
    "max_index_bytes": (12, MAX_SEGMENT_BYTES),
    "flush_interval_messages": (1, None),
    "flush_interval_ms": (0, None),
    "max_message_bytes": (0, MAX_SEGMENT_BYTES),
    "file_delete_delay_ms": (0, None),
    "producer_id_expiration_ms": (1, None),
    "compression": (PRODUCER, max(Codec)),
    "min_insync_replicas": (1, None),
    "min_compaction_lag_ms": (0, None),
    "max_compaction_lag_ms": (1, None),
    "delete_retention_ms": (0, None),
    **{f"compression_{c.name.lower()}_level": LEVELS[c][:2] for c in LEVELS},
}
