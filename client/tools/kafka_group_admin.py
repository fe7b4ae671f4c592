"""The brokers' consumer groups (Kafka's group protocol; docs/groups.md) as `ferry groups` and the dashboard
see them.

The paper's ZooKeeper groups are group_store.py's; this module handles the other kind: members and
assignments from the group's coordinator (DescribeGroups), committed offsets from ZooKeeper
(``/consumer_offsets``, where the coordinators keep them), resets written through the coordinator
(OffsetCommit from outside the group, which it refuses while the group has members, as Kafka does) and
deletion (DeleteGroups).
"""

from __future__ import annotations

from kazoo.client import KazooClient

from ferry.client.bootstrap import read_brokers
from ferry.client.errors import ClientError
from ferry.client.kafka_groups import KafkaGroupDescription, KafkaGroups
from ferry.wire.client_config import ClientConfig
from ferry.zk.cli_args import UsageError
from ferry.zk.group_offsets import fetch_offsets, group_protocol_type
from ferry.zk.group_offsets import list_groups as stored_groups


class KafkaGroupAdmin:
    """The Kafka-protocol groups of one cluster, found through its ZooKeeper (the live brokers, the stored
    offsets); each call opens the brokers' connections it needs and closes them."""

    def __init__(self, zk: KazooClient, client_config: ClientConfig | None = None) -> None:
        self.zk = zk
        self.client_config = client_config or ClientConfig.plaintext()

    def _groups_client(self) -> KafkaGroups | None:
        """A KafkaGroups over the cluster's live brokers; None when no broker is registered."""
        brokers = read_brokers(self.zk)
        return KafkaGroups(brokers, client_config=self.client_config) if brokers else None

    def list(self) -> dict[str, int | None]:
        """{group: members (None: no broker to ask)} of every Kafka-protocol group: those with committed
        offsets and those the coordinators know (members, no commit yet)."""
        names = set(stored_groups(self.zk))
        client = self._groups_client()
        if client is None:
            return dict.fromkeys(sorted(names))
        out: dict[str, int | None] = {}
        with client:
            names |= set(client.list())
            for g in sorted(names):
                try:
                    out[g] = len(client.describe(g).members)
                except ClientError:
                    out[g] = None
        return out

    def states(self) -> dict[str, str]:
        """{group: state} of the groups the coordinators know (ListGroups v0-2 tells no state: DescribeGroups)."""
        client = self._groups_client()
        if client is None:
            return {}
        with client:
            out = {}
            for g in client.list():
                try:
                    out[g] = client.describe(g).state
                except ClientError:
                    continue
            return out

    def describe(self, group: str) -> KafkaGroupDescription | None:
        """The coordinator's view of the group (None when no broker can be asked)."""
        client = self._groups_client()
        if client is None:
            return None
        with client:
            return client.describe(group)

    def exists(self, group: str) -> bool:
        if group_protocol_type(self.zk, group) is not None:
            return True
        try:
            d = self.describe(group)
        except ClientError:
            return False
        return d is not None and d.exists

    def offsets(self, group: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets, as the coordinators stored them."""
        return {tp: c.offset for tp, c in fetch_offsets(self.zk, group).items()}

    def check_no_members(self, group: str) -> None:
        """A reset is refused while the group has members: the coordinator would refuse the commit anyway
        (and the members would overwrite it at their next commit)."""
        d = self.describe(group)
        if d is None:
            raise UsageError("no live broker to reset a Kafka-protocol group through")
        refuse_with_members(d)

    def write_offsets(self, group: str, new: dict[tuple[str, int], int]) -> None:
        client = self._groups_client()
        if client is None:
            raise UsageError("no live broker to reset a Kafka-protocol group through")
        with client:
            client.commit(group, new)

    def delete(self, group: str) -> None:
        client = self._groups_client()
        if client is None:
            raise UsageError("no live broker to delete a Kafka-protocol group through")
        with client:
            client.delete(group)


def refuse_with_members(d: KafkaGroupDescription) -> None:
    """UsageError for a reset of a group that has members: the coordinator would refuse the commit anyway (and the
    members would overwrite it at their next commit). Shared by the ZooKeeper and the bootstrap paths."""
    if d.members:
        ids = ", ".join(m.member_id for m in d.members)
        raise UsageError(f"group {d.group!r} has {len(d.members)} live member(s) ({ids}) in state {d.state}; "
                         "stop them first (the coordinator refuses offsets from outside while a group has "
                         "members)")
