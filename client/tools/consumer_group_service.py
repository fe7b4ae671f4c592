"""What a cluster's consumer groups are doing, for `ferry groups` and the dashboard (Kafka's
ConsumerGroupService): both kinds of group, their members and, per partition, owner, committed offset,
log end and lag.

The paper's ZooKeeper groups (ferry's ConsumerConnector: members, owners and offsets under
/consumers/<group>) are read with group_store.py; the brokers' groups (Kafka's group protocol) through
:class:`KafkaGroupAdmin`. Log ends come from the brokers (ListOffsets); where no broker can tell, they are
None and so is the lag.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from ferry.client.cluster_admin import ClusterAdmin
from ferry.client.errors import ClientError
from ferry.client.group_dirs import validate_group
from ferry.client.group_store import group_exists, list_groups, read_members, read_offsets, read_owners
from ferry.client.simple_consumer import SimpleConsumer
from ferry.client.tools.bootstrap_groups import BootstrapGroups
from ferry.client.tools.kafka_group_admin import KafkaGroupAdmin
from ferry.wire.client_config import ClientConfig
from ferry.zk import TopicInfo
from ferry.zk.znodes import BROKER_TOPICS_PATH, topic_path

KINDS = ("zookeeper", "kafka")


class ConsumerGroupService:
    """The groups of the cluster behind ``zk`` (a started, chrooted client of ``zookeeper``), or, with ``admin``
    and no ZooKeeper, the brokers' groups of the cluster ``admin`` talks to (`--bootstrap-server`: topics and
    log ends from the brokers, and no ZooKeeper groups)."""

    def __init__(self, zk: KazooClient | None, zookeeper: str | None, client_id: str = "ferry-groups",
                 admin: ClusterAdmin | None = None, *, client_config: ClientConfig | None = None) -> None:
        """``client_config``: TLS/SASL towards the brokers (wire/client_config.py)."""
        self.zk = zk
        self.zookeeper = zookeeper
        self.client_id = client_id
        self.admin = admin
        self.client_config = client_config or ClientConfig.plaintext()
        self.kafka: KafkaGroupAdmin | BootstrapGroups = BootstrapGroups(admin) if admin is not None \
            else KafkaGroupAdmin(zk, self.client_config)

    # -- the cluster's topics, as a group's partitions are counted
    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions ([] when it does not exist or cannot be read)."""
        if self.admin is not None:
            t = self.admin.metadata(topic).topics.get(topic)
            return sorted(t.partitions) if t is not None and t.error is None else []
        try:
            data, _ = self.zk.get(topic_path(topic))
        except NoNodeError:
            return []
        try:
            return sorted(TopicInfo.decode(topic, data).partitions)
        except ValueError:
            return []

    def log_ends(self, topic: str, partitions: list[int]) -> dict[int, int | None]:
        """Log end offsets; None where the brokers cannot tell (down, or no broker at all)."""
        if self.admin is not None:
            return {p: end for (_, p), end in self.admin.log_ends([(topic, p) for p in partitions]).items()}
        out: dict[int, int | None] = dict.fromkeys(partitions)
        try:
            with SimpleConsumer(zookeeper=self.zookeeper, client_id=self.client_id, timeout_s=5.0,
                                client_config=self.client_config) as c:
                for p in partitions:
                    try:
                        out[p] = c.watermarks(topic, p)[1]
                    except ClientError:
                        pass
        except ClientError:
            pass
        return out

    # -- which groups
    def zookeeper_groups(self) -> list[str]:
        return list_groups(self.zk) if self.zk is not None else []

    def kinds(self, group: str, only: str | None = None) -> list[str]:
        """The kinds of group the id names (restricted to ``only`` when given)."""
        out = []
        if only != "kafka" and self.zk is not None and "/" not in group and group_exists(self.zk,
                                                                                          validate_group(group)):
            out.append("zookeeper")
        if only != "zookeeper" and self.kafka.exists(group):
            out.append("kafka")
        return out

    # -- describing one group
    def topics_of(self, group: str) -> list[str]:
        """Topics a ZooKeeper group consumes: those with offsets or owners, and those its live members
        subscribe to."""
        topics = {t for t, _ in read_offsets(self.zk, group)} | {t for t, _ in read_owners(self.zk, group)}
        existing = self.zk.get_children(BROKER_TOPICS_PATH) if self.zk.exists(BROKER_TOPICS_PATH) else []
        for sub in read_members(self.zk, group).values():
            if sub is not None:
                topics |= {t for t in existing if sub.matches(t)}
        return sorted(topics)

    def _rows(self, topics: list[str], owners: dict[tuple[str, int], str],
              committed: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
        """Per partition of ``topics``: owner, committed offset, log end and lag."""
        rows = []
        for topic in topics:
            parts = sorted(set(self.partitions(topic)) | {p for t, p in committed if t == topic})
            ends = self.log_ends(topic, parts)
            for p in parts:
                c, end = committed.get((topic, p)), ends.get(p)
                rows.append({"topic": topic, "partition": p, "owner": owners.get((topic, p)), "committed": c,
                             "log_end": end, "lag": end - c if c is not None and end is not None else None})
        return rows

    def describe_zookeeper_group(self, group: str) -> dict[str, Any]:
        """Members (with their subscriptions) and the partition rows of a ZooKeeper group."""
        members = read_members(self.zk, group)
        rows = self._rows(self.topics_of(group), read_owners(self.zk, group), read_offsets(self.zk, group))
        return {"group": group, "type": "zookeeper",
                "members": [{"id": m, "subscription": s.describe() if s else None} for m, s in members.items()],
                "partitions": rows}

    def describe_kafka_group(self, group: str) -> dict[str, Any]:
        """Coordinator state, members (with their assignments) and the partition rows of a Kafka-protocol
        group; ``note`` says why members are unknown when the coordinator could not be asked."""
        committed = self.kafka.offsets(group)
        try:
            d = self.kafka.describe(group)
        except ClientError as e:
            d, note = None, f"the coordinator could not be asked: {e}"
        else:
            note = None if d is not None else "no live broker: members unknown"
        owners = d.owners() if d is not None else {}
        rows = self._rows(sorted({t for t, _ in committed} | {t for t, _ in owners}), owners, committed)
        members = [] if d is None else [
            {"id": m.member_id, "client_id": m.client_id, "host": m.client_host,
             "assignment": [{"topic": t, "partition": p} for t, ps in sorted(m.assignment.items()) for p in ps]}
            for m in d.members]
        doc: dict[str, Any] = {"group": group, "type": "kafka", "state": d.state if d is not None else None,
                               "protocol": d.protocol if d is not None else None,
                               "coordinator": d.coordinator if d is not None else None, "members": members,
                               "partitions": rows}
        if note:
            doc["note"] = note
        return doc

    def describe(self, group: str, kind: str) -> dict[str, Any]:
        return self.describe_zookeeper_group(group) if kind == "zookeeper" else self.describe_kafka_group(group)
