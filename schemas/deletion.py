"""Deleting subjects and versions, as Confluent's registry does: first soft (hidden from lists, kept in
ZooKeeper, its id still resolvable), then, only once soft-deleted, permanently (the version znodes go).

Schema ids themselves are never deleted: messages already written (and mirrored, and loaded) carry them,
so ``GET /schemas/ids/<id>`` keeps answering after any delete.
"""

from __future__ import annotations

from kazoo.exceptions import NoNodeError, NotEmptyError

from ferry.schemas.errors import (
    OperationNotPermittedError,
    ReferenceExistsError,
    SubjectNotSoftDeletedError,
    SubjectSoftDeletedError,
    UnknownSubjectError,
    UnknownVersionError,
    VersionNotSoftDeletedError,
    VersionSoftDeletedError,
)
from ferry.schemas.registry import SUBJECTS, SchemaRegistry, validate_subject, version_data


class SubjectDeletion:
    """Soft and permanent deletes of one registry's subjects and versions."""

    def __init__(self, registry: SchemaRegistry, honour_mode: bool = True) -> None:
        """``honour_mode=False``: the mirror's copy, which applies live deletes to a (typically READONLY) replica."""
        self._registry = registry
        self._client = registry.client
        self._honour_mode = honour_mode

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Delete every version of ``subject``; the version numbers deleted."""
        entries = self._entries(subject)
        live = [v for v, _, deleted in entries if not deleted]
        if permanent:
            if live:
                raise SubjectNotSoftDeletedError(
                    f"Subject '{subject}' was not deleted first before being permanently deleted")
            for version, _, _ in entries:
                self._refuse_if_referenced(subject, version, permanent)
            for version, _, _ in entries:
                self._remove(subject, version)
            self._remove_subject(subject)
            return [v for v, _, _ in entries]
        if not live:
            raise SubjectSoftDeletedError(f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")
        for version in live:
            self._refuse_if_referenced(subject, version, permanent)
        for version, schema_id, deleted in entries:
            if not deleted:
                self._mark(subject, version, schema_id)
        return live

    def delete_version(self, subject: str, version: int, permanent: bool = False) -> int:
        """Delete one version of ``subject``; its number."""
        entries = {v: (sid, deleted) for v, sid, deleted in self._entries(subject)}
        if version not in entries:
            raise UnknownVersionError(f"Version {version} not found.")
        schema_id, deleted = entries[version]
        self._refuse_if_referenced(subject, version, permanent)
        if permanent:
            if not deleted:
                raise VersionNotSoftDeletedError(f"Subject '{subject}' Version {version} was not deleted first "
                                                 "before being permanently deleted")
            self._remove(subject, version)
            if len(entries) == 1:
                self._remove_subject(subject)
            return version
        if deleted:
            raise VersionSoftDeletedError(f"Subject '{subject}' Version {version} was soft deleted.Set "
                                          "permanent=true to delete permanently")
        self._mark(subject, version, schema_id)
        return version

    def _refuse_if_referenced(self, subject: str, version: int, permanent: bool) -> None:
        """A version another schema references stays (its stored schema could no longer be parsed); the
        mirror's copy applies what the live side allowed."""
        if not self._honour_mode:
            return
        ids = self._registry.references.referenced_by(subject, version, deleted=permanent)
        if ids:
            raise ReferenceExistsError(f"One or more references exist to the schema {{subject={subject}, "
                                       f"version={version}}}: schema id(s) {', '.join(map(str, ids))}")

    def _entries(self, subject: str) -> list[tuple[int, int, bool]]:
        validate_subject(subject)
        if self._honour_mode and self._registry.modes.mode(subject).startswith("READONLY"):
            raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")
        entries = self._registry.version_entries(subject)
        if not entries:
            raise UnknownSubjectError(f"Subject '{subject}' not found.")
        return entries

    def _mark(self, subject: str, version: int, schema_id: int) -> None:
        self._client.set(f"{SUBJECTS}/{subject}/versions/{version}", version_data(schema_id, deleted=True))

    def _remove(self, subject: str, version: int) -> None:
        try:
            self._client.delete(f"{SUBJECTS}/{subject}/versions/{version}")
        except NoNodeError:
            pass

    def _remove_subject(self, subject: str) -> None:
        for path in (f"{SUBJECTS}/{subject}/versions", f"{SUBJECTS}/{subject}"):
            try:
                self._client.delete(path)
            except (NoNodeError, NotEmptyError):  # a registration raced in: keep the subject
                return
