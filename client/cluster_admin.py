"""ClusterAdmin: one cluster administered through its brokers' admin APIs alone (`--bootstrap-server`), as Kafka 4's
tools do: topics, configs and the brokers' consumer groups.

The ZooKeeper paths (zk/topic_admin.py, kafka_group_admin.py) stay for the paper's ZooKeeper groups and for a
cluster whose brokers are down; this class needs only a broker address. It is librdkafka's AdminClient
underneath, so client settings (TLS, SASL: `--command-config`) are librdkafka's names. Every failure becomes
ferry's one error hierarchy here (client/errors.py): a broker's refusal a KafkaResponseError naming Kafka's
error, a cluster that does not answer a BrokerUnavailableError.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from ferry.client.errors import BrokerUnavailableError, ClientError, KafkaResponseError, UnknownTopicError
from ferry.client.kafka_groups import KafkaGroupDescription, KafkaGroupMember
from ferry.client.rate_limited_log import rate_limited_logger

# librdkafka's own codes for "nobody answered": a runtime failure, not a refusal
_UNREACHABLE = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                          KafkaError._RESOLVE, KafkaError._WAIT_COORD, KafkaError._TIMED_OUT_QUEUE})
ENTITY_TYPES = {"topics": ConfigResource.Type.TOPIC, "brokers": ConfigResource.Type.BROKER}


def _error(exc: BaseException, what: str) -> ClientError:
    """ferry's error for a librdkafka failure of ``what``."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(err, KafkaError):
        return ClientError(f"{what}: {exc}")
    code = err.code()
    if code in _UNREACHABLE:
        return BrokerUnavailableError(f"{what}: {err.str()}")
    if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return UnknownTopicError(f"{what}: {err.str()}")
    if code < 0:  # librdkafka's local codes (a bad argument, an unsupported feature)
        return ClientError(f"{what}: {err.str()}")
    out = KafkaResponseError(code, what)
    out.args = (f"{what}: {err.name()} ({err.str()})",)
    return out


class ClusterAdmin:
    """The admin operations `ferry topics|configs|groups` perform with `--bootstrap-server`; ``settings`` are extra
    librdkafka client settings (security), ``timeout_s`` bounds every request."""

    def __init__(self, bootstrap: str, settings: Mapping[str, str] | None = None, timeout_s: float = 30.0,
                 client_id: str = "ferry-admin") -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": client_id,
                                   "logger": rate_limited_logger("ferry.librdkafka"), **(settings or {})})

    def _wait(self, future: Future, what: str) -> Any:
        try:
            return future.result(self.timeout_s + 5)
        except KafkaException as e:
            raise _error(e, what) from None
        except TimeoutError:
            raise BrokerUnavailableError(f"{what}: no answer from {self.bootstrap} in {self.timeout_s:g} s") from None

    def _opts(self) -> dict[str, float]:
        return {"request_timeout": self.timeout_s}

    # ------------------------------------------------------------------ topics
    def metadata(self, topic: str | None = None) -> Any:
        """librdkafka's ClusterMetadata (brokers, topics with partitions, leaders, replicas, ISR)."""
        try:
            return self._admin.list_topics(topic, timeout=self.timeout_s)
        except KafkaException as e:
            raise _error(e, f"metadata from {self.bootstrap}") from None

    def topic_names(self) -> list[str]:
        return sorted(self.metadata().topics)

    def describe_topics(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """Each topic as topic_description.describe_topic shapes it (the same keys), read from Metadata and, for its
        config overrides, DescribeConfigs; an unknown name raises UnknownTopicError."""
        md = self.metadata()
        if names is not None:
            missing = [n for n in names if n not in md.topics]
            if missing:
                raise UnknownTopicError(f"topic {missing[0]!r} does not exist")
        wanted = sorted(md.topics) if names is None else sorted(names)
        overrides = self._topic_overrides(wanted)
        docs = []
        for name in wanted:
            parts = []
            for p in sorted(md.topics[name].partitions.values(), key=lambda p: p.id):
                leader = p.leader if p.leader >= 0 else None
                broker = md.brokers.get(leader) if leader is not None else None
                parts.append({"partition": p.id, "leader": leader, "leader_epoch": -1, "replicas": list(p.replicas),
                              "isr": list(p.isrs), "under_replicated": len(p.isrs) < len(p.replicas),
                              "offline_replicas": [b for b in p.replicas if b not in md.brokers],
                              "broker": f"{broker.host}:{broker.port}" if broker else None, "datacenter": None,
                              "alive": broker is not None})
            rf = len(parts[0]["replicas"]) if parts else 0
            docs.append({"topic": name, "replication_factor": rf, "partitions": parts,
                         "config": overrides.get(name, {})})
        return docs

    def _topic_overrides(self, names: list[str]) -> dict[str, dict[str, str]]:
        """{topic: {config: value}} of the configs set on each topic (not the broker's defaults)."""
        if not names:
            return {}
        futures = self._admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n) for n in names],
                                               **self._opts())
        out = {}
        for res, fut in futures.items():
            entries = self._wait(fut, f"DescribeConfigs of topic {res.name}")
            out[res.name] = {e.name: e.value for e in entries.values()
                             if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None}
        return out

    def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                     assignment: dict[int, list[int]] | None, config: dict[str, str]) -> None:
        """CreateTopics; without a replication factor the brokers' default.replication.factor applies (-1)."""
        if assignment is not None:
            replicas = [assignment[p] for p in sorted(assignment)]  # librdkafka wants the count with them
            topic = NewTopic(name, len(replicas), replica_assignment=replicas, config=config)
        else:
            topic = NewTopic(name, partitions if partitions is not None else -1,
                             replication_factor if replication_factor is not None else -1, config=config)
        self._wait(self._admin.create_topics([topic], **self._opts())[name], f"CreateTopics {name}")

    def delete_topics(self, names: list[str]) -> None:
        futures = self._admin.delete_topics(names, **self._opts())
        for name in names:
            self._wait(futures[name], f"DeleteTopics {name}")

    def create_partitions(self, name: str, total: int) -> None:
        self._wait(self._admin.create_partitions([NewPartitions(name, total)], **self._opts())[name],
                   f"CreatePartitions {name}")

    def elect_preferred_leaders(self, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], Any]:
        """ElectLeaders (preferred): {(topic, partition): None when elected, else librdkafka's KafkaError (e.g.
        ELECTION_NOT_NEEDED: its preferred replica leads already)}; ``partitions`` None: every partition."""
        tps = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
        # no timeout keywords: confluent-kafka 2.16's elect_leaders refuses them (its argument parsing is broken)
        got = self._wait(self._admin.elect_leaders(ElectionType.PREFERRED, tps), "ElectLeaders")
        return {(tp.topic, tp.partition): err.args[0] if isinstance(err, KafkaException) else err
                for tp, err in got.items()}

    # ------------------------------------------------------------------ configs
    def describe_configs(self, entity_type: str, name: str) -> list[dict[str, Any]]:
        """Every config of the topic or broker by name: ``{"name", "value", "source", "sensitive", "read_only"}``,
        ``source`` as Kafka names it (DYNAMIC_TOPIC_CONFIG: set on the topic; DEFAULT_CONFIG, ...)."""
        res = ConfigResource(ENTITY_TYPES[entity_type], name)
        entries = self._wait(self._admin.describe_configs([res], **self._opts())[res],
                             f"DescribeConfigs of {entity_type[:-1]} {name}")
        return [{"name": e.name, "value": None if e.is_sensitive else e.value, "source": _source_name(e.source),
                 "sensitive": bool(e.is_sensitive), "read_only": bool(e.is_read_only)}
                for e in sorted(entries.values(), key=lambda e: e.name)]

    def alter_configs(self, entity_type: str, name: str, add: dict[str, str], delete: list[str]) -> None:
        """IncrementalAlterConfigs: set ``add``, remove ``delete`` (back to the default), nothing else touched."""
        changes = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in add.items()]
        changes += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        res = ConfigResource(ENTITY_TYPES[entity_type], name, incremental_configs=changes)
        self._wait(self._admin.incremental_alter_configs([res], **self._opts())[res],
                   f"IncrementalAlterConfigs of {entity_type[:-1]} {name}")

    # ------------------------------------------------------------------ consumer groups
    def list_groups(self) -> dict[str, str]:
        """{group: state} of every group the brokers coordinate (ListGroups)."""
        listed = self._wait(self._admin.list_consumer_groups(**self._opts()), "ListGroups")
        if listed.errors:  # a broker that did not answer: the listing would be partial (or empty)
            first = listed.errors[0]
            raise _error(first if isinstance(first, KafkaException) else KafkaException(first),
                         f"ListGroups at {self.bootstrap}")
        return {g.group_id: _state_name(g.state) for g in listed.valid}

    def describe_group(self, group: str) -> KafkaGroupDescription:
        """The coordinator's view (DescribeGroups); a group it does not know is state Dead with no members."""
        d = self._wait(self._admin.describe_consumer_groups([group], **self._opts())[group], f"DescribeGroups {group}")
        members = [KafkaGroupMember(m.member_id, m.client_id, m.host, _assignment(m.assignment))
                   for m in d.members]
        coordinator = d.coordinator.id if d.coordinator is not None else -1
        return KafkaGroupDescription(group, _state_name(d.state), "consumer", d.partition_assignor or "", coordinator,
                                     members)

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets (OffsetFetch of every partition it has committed)."""
        got = self._wait(self._admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                                 **self._opts())[group], f"OffsetFetch {group}")
        return {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions if tp.offset >= 0}

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """OffsetCommit from outside the group (refused by the coordinator while the group has members)."""
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        got = self._wait(self._admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)],
                                                                  **self._opts())[group], f"OffsetCommit {group}")
        for tp in got.topic_partitions:
            if tp.error is not None:
                raise _error(KafkaException(tp.error), f"OffsetCommit {group} {tp.topic}/{tp.partition}")

    def delete_group(self, group: str) -> None:
        self._wait(self._admin.delete_consumer_groups([group], **self._opts())[group], f"DeleteGroups {group}")

    def log_ends(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """Log end offsets (ListOffsets latest); None where the leader cannot tell."""
        if not partitions:
            return {}
        futures = self._admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions},
                                           **self._opts())
        out: dict[tuple[str, int], int | None] = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result(self.timeout_s + 5).offset
            except (KafkaException, TimeoutError):
                out[(tp.topic, tp.partition)] = None
        return out


def _source_name(source: int) -> str:
    try:
        return ConfigSource(source).name
    except ValueError:
        return "UNKNOWN_CONFIG"


def _state_name(state: Any) -> str:
    """librdkafka's ConsumerGroupState as Kafka's tools spell it: Stable, PreparingRebalance, Empty, ..."""
    name = getattr(state, "name", str(state))
    return {"STABLE": "Stable", "PREPARING_REBALANCING": "PreparingRebalance",
            "COMPLETING_REBALANCING": "CompletingRebalance", "EMPTY": "Empty", "DEAD": "Dead",
            "UNKNOWN": "Unknown"}.get(name, name)


def _assignment(assignment: Any) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in (assignment.topic_partitions if assignment is not None else []):
        out.setdefault(tp.topic, []).append(tp.partition)
    return {t: sorted(ps) for t, ps in out.items()}
