"""The registry side of schema references: pinning a reference to a version, resolving it to the schema it
names, and finding which registered schemas reference a subject version (``/referencedby``, and the 42206
refusal of deleting one). The reference itself and the per-type inlining live in references.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ferry.schemas.errors import SchemaError, SchemaParseError, UnknownSubjectError
from ferry.schemas.references import LATEST, SchemaReference, parse_references
from ferry.schemas.schema_types import TypedSchema
from ferry.schemas.versions import SchemaVersion


class RegistryReads(Protocol):
    """What reference resolution reads from the registry (SchemaRegistry)."""

    def version(self, subject: str, version: int, deleted: bool = False) -> SchemaVersion: ...
    def versions(self, subject: str, deleted: bool = False) -> list[int]: ...
    def get_typed(self, schema_id: int) -> TypedSchema: ...
    def subjects(self, deleted: bool = False) -> list[str]: ...
    def version_entries(self, subject: str) -> list[tuple[int, int, bool]]: ...


class ReferenceLinks:
    """Schema references of one registry: pin, resolve, and who references what."""

    def __init__(self, registry: RegistryReads) -> None:
        self._registry = registry

    def pin(self, references: Sequence[SchemaReference] | Sequence[dict] | None) -> tuple[SchemaReference, ...]:
        """``references`` with ``-1`` replaced by the subject's latest version; each must name a live version
        (else SchemaParseError, Confluent's 42201)."""
        pinned = []
        for ref in parse_references(references):
            try:
                number = self._registry.versions(ref.subject)[-1] if ref.version == LATEST else ref.version
                self._registry.version(ref.subject, number)
            except UnknownSubjectError:
                raise SchemaParseError(f"Invalid schema: reference {ref.name!r} names subject {ref.subject!r} "
                                       f"version {ref.version}, which is not registered") from None
            pinned.append(SchemaReference(ref.name, ref.subject, number))
        return tuple(pinned)

    def resolve(self, ref: SchemaReference) -> TypedSchema:
        """The schema a pinned reference names (soft-deleted versions too: a stored schema must always parse)."""
        try:
            found = self._registry.version(ref.subject, ref.version, deleted=True)
        except UnknownSubjectError:
            raise SchemaError(f"reference {ref.name!r}: subject {ref.subject!r} version {ref.version} is gone") \
                from None
        return self._registry.get_typed(found.id)

    def referenced_by(self, subject: str, version: int, deleted: bool = False) -> list[int]:
        """Ids of the live subject versions whose schema references ``subject`` version ``version``
        (``deleted``: soft-deleted ones too, whose stored schema still needs it)."""
        ids = set()
        for other in self._registry.subjects(deleted):
            for _, schema_id, is_deleted in self._registry.version_entries(other):
                if (is_deleted and not deleted) or schema_id in ids:
                    continue
                refs = self._registry.get_typed(schema_id).references
                if any(r.subject == subject and r.version == version for r in refs):
                    ids.add(schema_id)
        return sorted(ids)
