"""Kafka's ACL vocabulary with its wire codes (ResourceType, PatternType, AclOperation, AclPermissionType) and the
names kafka-acls and Kafka's ZooKeeper znodes spell them with. Brokers, the admin APIs and `ferry acls` share it."""

from __future__ import annotations

from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def title(self) -> str:
        """The name in Kafka's znodes and JSON (Topic, Group, Cluster, TransactionalId)."""
        return _RESOURCE_TITLES.get(self, self.name.title())


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters: any pattern type with exactly this name
    MATCH = 2  # filters: every pattern that would apply to a resource of this name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12

    @property
    def title(self) -> str:
        """Kafka's spelling: Read, DescribeConfigs, IdempotentWrite, ..."""
        return "".join(part.title() for part in self.name.split("_"))


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3

    @property
    def title(self) -> str:
        return self.name.title()


_RESOURCE_TITLES = {ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken"}

CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name
WILDCARD = "*"  # a literal name (or host, or principal name) matching every one

# Kafka's implications: an allowed Read/Write/Delete/Alter also allows Describe; AlterConfigs allows DescribeConfigs.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}

SERVED_RESOURCES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID)
SERVED_OPERATIONS = tuple(op for op in AclOperation if op >= AclOperation.ALL)


def resource_type_named(title: str) -> ResourceType:
    """'Topic' / 'topic' / 'TransactionalId' / 'transactional-id' -> ResourceType; ValueError otherwise."""
    key = title.replace("-", "").replace("_", "").lower()
    for rt in SERVED_RESOURCES:
        if rt.title.lower() == key:
            return rt
    raise ValueError(f"unknown resource type {title!r} (Topic, Group, Cluster or TransactionalId)")


def operation_named(title: str) -> AclOperation:
    """'Read' / 'read' / 'DescribeConfigs' / 'describe-configs' -> AclOperation; ValueError otherwise."""
    key = title.replace("-", "").replace("_", "").lower()
    for op in SERVED_OPERATIONS:
        if op.title.lower() == key:
            return op
    raise ValueError(f"unknown operation {title!r} (one of {', '.join(op.title for op in SERVED_OPERATIONS)})")


def permission_named(title: str) -> AclPermissionType:
    key = title.lower()
    for p in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        if p.title.lower() == key:
            return p
    raise ValueError(f"unknown permission type {title!r} (Allow or Deny)")
