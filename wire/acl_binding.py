"""ACL bindings as Kafka models them: a resource pattern (type, name, literal or prefixed) bound to an access control
entry (principal, host, operation, allow or deny), and the filters that DescribeAcls, DeleteAcls and `ferry acls
list|remove` select bindings with. Principals are kept as Kafka spells them (``User:alice``)."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.wire.protocol.acl_types import (
    WILDCARD,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)


@dataclass(frozen=True, order=True)
class ResourcePattern:
    """A topic, group, cluster or transactional id named literally (``*``: every one) or by a prefix."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        kind = "" if self.pattern_type == PatternType.LITERAL else f" ({self.pattern_type.name.lower()})"
        return f"{self.resource_type.title}:{self.name}{kind}"

    def applies_to(self, name: str) -> bool:
        """Whether this pattern covers the resource called ``name`` (of this pattern's type)."""
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD


@dataclass(frozen=True, order=True)
class AccessControlEntry:
    principal: str  # User:alice, or User:* for every user
    host: str  # an IP address, or * for every host
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (f"{self.principal} has {self.permission.title} permission for operation {self.operation.title} "
                f"from host {self.host}")


@dataclass(frozen=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True)
class AclBindingFilter:
    """None / ANY match everything; pattern_type MATCH selects every pattern that applies to ``name``."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def invalid(self) -> str | None:
        """Why a broker must refuse this filter (an UNKNOWN code in it), or None."""
        for what, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                            ("operation", self.operation), ("permission type", self.permission)):
            if value == 0:
                return f"the filter's {what} is UNKNOWN"
        return None

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != p.pattern_type:
            return False
        if self.name is None:
            return True
        if pt != PatternType.MATCH:
            return self.name == p.name
        return p.applies_to(self.name)

    def matches_entry(self, e: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and (self.operation == AclOperation.ANY or self.operation == e.operation)
                and (self.permission == AclPermissionType.ANY or self.permission == e.permission))

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b.pattern) and self.matches_entry(b.entry)


def check_binding(b: AclBinding) -> str | None:
    """Why a binding cannot be stored (Kafka's CreateAcls rules), or None."""
    p, e = b.pattern, b.entry
    if p.resource_type not in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                               ResourceType.TRANSACTIONAL_ID):
        return f"resource type {p.resource_type.name} is not supported (Topic, Group, Cluster, TransactionalId)"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"pattern type {p.pattern_type.name} cannot be stored (LITERAL or PREFIXED)"
    if not p.name:
        return "the resource name is empty"
    if p.resource_type == ResourceType.CLUSTER and (p.name != "kafka-cluster" or p.pattern_type != PatternType.LITERAL):
        return "the cluster resource is the literal name kafka-cluster"
    if e.operation < AclOperation.ALL or e.operation > AclOperation.IDEMPOTENT_WRITE:
        return f"operation {e.operation.name} cannot be stored"
    if e.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"permission type {e.permission.name} cannot be stored (ALLOW or DENY)"
    kind, sep, name = e.principal.partition(":")
    if not sep or not kind or not name:
        return f"principal {e.principal!r} is not TYPE:NAME (e.g. User:alice)"
    if not e.host:
        return "the host is empty (an IP address, or *)"
    return None
