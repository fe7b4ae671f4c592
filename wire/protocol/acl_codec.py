"""The pieces DescribeAcls, CreateAcls and DeleteAcls share: a binding and a binding filter on the wire
(v0: literal patterns only, no pattern type field; v1 adds it)."""

from __future__ import annotations

from ferry.wire.acl_binding import AccessControlEntry, AclBinding, AclBindingFilter, ResourcePattern
from ferry.wire.protocol.acl_types import AclOperation, AclPermissionType, PatternType, ResourceType
from ferry.wire.protocol.primitives import Reader, Writer


def _enum(kind: type, value: int) -> object:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN: the broker answers the entry with an error


def read_filter(r: Reader, version: int) -> AclBindingFilter:
    rtype = _enum(ResourceType, r.int8())
    name = r.nullable_string()
    pattern = _enum(PatternType, r.int8()) if version >= 1 else PatternType.LITERAL
    principal = r.nullable_string()
    host = r.nullable_string()
    op = _enum(AclOperation, r.int8())
    perm = _enum(AclPermissionType, r.int8())
    return AclBindingFilter(rtype, name, pattern, principal, host, op, perm)  # type: ignore[arg-type]


def write_filter(w: Writer, f: AclBindingFilter, version: int) -> None:
    w.int8(f.resource_type).string(f.name)
    if version >= 1:
        w.int8(f.pattern_type)
    w.string(f.principal).string(f.host).int8(f.operation).int8(f.permission)


def read_binding(r: Reader, version: int) -> AclBinding:
    rtype = _enum(ResourceType, r.int8())
    name = r.string()
    pattern = _enum(PatternType, r.int8()) if version >= 1 else PatternType.LITERAL
    principal = r.string()
    host = r.string()
    op = _enum(AclOperation, r.int8())
    perm = _enum(AclPermissionType, r.int8())
    return AclBinding(ResourcePattern(rtype, name, pattern),  # type: ignore[arg-type]
                      AccessControlEntry(principal, host, op, perm))  # type: ignore[arg-type]


def write_binding(w: Writer, b: AclBinding, version: int) -> None:
    w.int8(b.pattern.resource_type).string(b.pattern.name)
    if version >= 1:
        w.int8(b.pattern.pattern_type)
    write_entry(w, b.entry)


def write_entry(w: Writer, e: AccessControlEntry) -> None:
    w.string(e.principal).string(e.host).int8(e.operation).int8(e.permission)


def read_entry(r: Reader) -> AccessControlEntry:
    principal, host = r.string(), r.string()
    op, perm = _enum(AclOperation, r.int8()), _enum(AclPermissionType, r.int8())
    return AccessControlEntry(principal, host, op, perm)  # type: ignore[arg-type]

