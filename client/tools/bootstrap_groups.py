"""The brokers' consumer groups through `--bootstrap-server` alone (ListGroups, DescribeGroups, OffsetFetch,
OffsetCommit, DeleteGroups via ClusterAdmin): the same face as kafka_group_admin.py's KafkaGroupAdmin, which
finds the brokers and the committed offsets in ZooKeeper instead. ConsumerGroupService takes either."""

from __future__ import annotations

from ferry.client.cluster_admin import ClusterAdmin
from ferry.client.errors import ClientError
from ferry.client.kafka_groups import KafkaGroupDescription
from ferry.client.tools.kafka_group_admin import refuse_with_members


class BootstrapGroups:
    """Kafka-protocol groups of the cluster behind ``admin``."""

    def __init__(self, admin: ClusterAdmin) -> None:
        self.admin = admin

    def list(self) -> dict[str, int | None]:
        """{group: members (None: its coordinator could not say)} of every group the brokers coordinate."""
        out: dict[str, int | None] = {}
        for g in sorted(self.admin.list_groups()):
            try:
                out[g] = len(self.admin.describe_group(g).members)
            except ClientError:
                out[g] = None
        return out

    def states(self) -> dict[str, str]:
        """{group: state} as ListGroups reports it (Stable, Empty, PreparingRebalance, ...)."""
        return self.admin.list_groups()

    def describe(self, group: str) -> KafkaGroupDescription:
        return self.admin.describe_group(group)

    def exists(self, group: str) -> bool:
        try:
            return self.describe(group).exists or bool(self.offsets(group))
        except ClientError:
            return False

    def offsets(self, group: str) -> dict[tuple[str, int], int]:
        return self.admin.committed(group)

    def check_no_members(self, group: str) -> None:
        """A reset is refused while the group has members (the coordinator would refuse the commit anyway)."""
        refuse_with_members(self.describe(group))

    def write_offsets(self, group: str, new: dict[tuple[str, int], int]) -> None:
        self.admin.commit(group, new)

    def delete(self, group: str) -> None:
        self.admin.delete_group(group)
