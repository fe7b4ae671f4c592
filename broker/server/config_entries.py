"""What DescribeConfigs lists: a topic's settings (its overrides, else the broker's values) and a broker's own.

Names are Kafka's. A topic entry's source says whether the topic sets it (DYNAMIC_TOPIC_CONFIG), the broker's
properties do (STATIC_BROKER_CONFIG) or nobody (DEFAULT_CONFIG); its synonyms are the topic name and the
broker setting that provides the default (``retention.ms`` / ``log.retention.ms``), as Kafka lists them.
Broker settings are read-only: ferry has no dynamic broker configs (they come from the properties file and
flags, and change with a restart).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ferry.broker.server.broker_config import REPLICATION_KEYS, BrokerConfig
from ferry.wire.log_config import BROKER_CONFIG_NAMES, LOG_SETTINGS, TOPIC_CONFIG_NAMES, LogConfig
from ferry.wire.protocol.describe_configs import (
    SOURCE_DEFAULT,
    SOURCE_STATIC_BROKER,
    SOURCE_TOPIC,
    ConfigEntry,
)
from ferry.wire.record.compression import COMPRESSION_NAMES

_BROKER_KEY_OF = {attr: broker for attr, _, broker in LOG_SETTINGS}  # LogConfig attribute -> broker setting
_LOG_DEFAULTS = LogConfig()
# Kafka's topic settings that ferry does not implement but clients look for, with the only value ferry has.
FIXED_TOPIC_SETTINGS: dict[str, str] = {}


def render(attr: str, value: object) -> str:
    """A LogConfig attribute's value as the config string Kafka uses."""
    if isinstance(value, bool):
        if attr == "log_append_time":
            return "LogAppendTime" if value else "CreateTime"
        return "true" if value else "false"
    if attr == "compression":
        return COMPRESSION_NAMES[int(value)]  # type: ignore[call-overload]
    return str(value)


def topic_entries(topic_config: Mapping[str, str], broker_log: LogConfig, synonyms: bool) -> list[ConfigEntry]:
    out = []
    for name, attr in TOPIC_CONFIG_NAMES.items():
        broker_value = getattr(broker_log, attr)
        broker_source = SOURCE_STATIC_BROKER if broker_value != getattr(_LOG_DEFAULTS, attr) else SOURCE_DEFAULT
        broker_key = _BROKER_KEY_OF.get(attr)
        syn: list[tuple[str, str | None, int]] = []
        if name in topic_config:
            value, source = topic_config[name], SOURCE_TOPIC
            syn.append((name, value, SOURCE_TOPIC))
        else:
            value, source = render(attr, broker_value), broker_source
        if broker_key is not None:
            syn.append((broker_key, render(attr, broker_value), broker_source))
        out.append(ConfigEntry(name, value, source, synonyms=syn if synonyms else []))
    for name, value in sorted(topic_config.items()):  # names ferry does not use, kept as given
        if name not in TOPIC_CONFIG_NAMES:
            out.append(ConfigEntry(name, value, SOURCE_TOPIC, synonyms=[(name, value, SOURCE_TOPIC)] if synonyms else []))
    for name, value in FIXED_TOPIC_SETTINGS.items():
        if name not in topic_config:
            out.append(ConfigEntry(name, value, SOURCE_DEFAULT, read_only=True))
    return out


def broker_entries(cfg: BrokerConfig, synonyms: bool) -> list[ConfigEntry]:
    defaults = {f.name: f.default for f in dataclasses.fields(BrokerConfig) if f.default is not dataclasses.MISSING}
    rows: list[tuple[str, str, bool]] = [  # (name, value, is the default)
        ("broker.id", str(cfg.broker_id), False),
        ("listeners", ",".join(f"{lst.name}://{lst.host}:{lst.port}" for lst in cfg.security.listeners), False),
        ("advertised.listeners", ",".join(f"{lst.name}://{lst.advertised_host}:{lst.advertised_port}"
                                          for lst in cfg.security.listeners), False),
        ("inter.broker.listener.name", cfg.security.inter_broker_listener, False),
        ("log.dirs", str(cfg.data_dir), False),
        ("zookeeper.connect", cfg.zookeeper, False),
        ("broker.rack", cfg.datacenter, False),
        ("socket.request.max.bytes", str(cfg.max_request_bytes),
         cfg.max_request_bytes == defaults["max_request_bytes"]),
        ("auto.create.topics.enable", render("", cfg.auto_create_topics),
         cfg.auto_create_topics == defaults["auto_create_topics"]),
        ("num.partitions", str(cfg.num_partitions), cfg.num_partitions == defaults["num_partitions"]),
        ("zookeeper.session.timeout.ms", str(int(cfg.zk_session_timeout_s * 1000)),
         cfg.zk_session_timeout_s == defaults["zk_session_timeout_s"]),
        ("log.retention.check.interval.ms", str(cfg.retention_check_interval_ms),
         cfg.retention_check_interval_ms == defaults["retention_check_interval_ms"]),
        ("connections.max.idle.ms", str(cfg.connections_max_idle_ms),
         cfg.connections_max_idle_ms == defaults["connections_max_idle_ms"]),
    ]
    for key, attr in BROKER_CONFIG_NAMES.items():
        value = getattr(cfg.log, attr)
        rows.append((key, render(attr, value), value == getattr(_LOG_DEFAULTS, attr)))
    for key, attr in REPLICATION_KEYS.items():
        value = getattr(cfg, attr)
        rows.append((key, render(attr, value), value == defaults.get(attr)))
    out = []
    for name, value, is_default in rows:
        source = SOURCE_DEFAULT if is_default else SOURCE_STATIC_BROKER
        out.append(ConfigEntry(name, value, source, read_only=True,
                               synonyms=[(name, value, source)] if synonyms else []))
    return out
