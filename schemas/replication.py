"""Copy one cluster's schema registry into another, ids preserved (live → offline, next to the mirror).

Mirrored messages carry the live registry's schema ids, so the offline cluster's registry must hold
the same id → schema mapping before loaders decode them. The offline registry is a replica: schemas
are registered on the live side only (an id that already means something else offline is refused,
never overwritten). Copying is idempotent and only transfers what the target lacks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ferry.schemas.deletion import SubjectDeletion
from ferry.schemas.registry import IDS, SUBJECTS, SchemaRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicationResult:
    ids_copied: int
    versions_copied: int


def replicate(source: SchemaRegistry, target: SchemaRegistry) -> ReplicationResult:
    """Copy every schema id (any type) and subject version of ``source`` missing from ``target``, with their
    soft deletes; a version permanently deleted in ``source`` goes from ``target`` once it is soft-deleted
    there too (a permanent delete always follows a soft one, so nothing registered offline is touched)."""
    src, dst = source.client, target.client
    have_ids = set(_children(dst, IDS))
    ids = 0
    for child in sorted(_children(src, IDS), key=_int_or_max):
        if child in have_ids or not child.isdigit():
            continue
        target.import_schema(int(child), source.get_typed(int(child)))
        ids += 1
    versions = 0
    for subject in sorted(set(_children(src, SUBJECTS)) | set(_children(dst, SUBJECTS))):
        wanted = {v: (sid, deleted) for v, sid, deleted in source.version_entries(subject)}
        have = {v: (sid, deleted) for v, sid, deleted in target.version_entries(subject)}
        for version, (schema_id, deleted) in sorted(wanted.items()):
            if have.get(version) == (schema_id, deleted):
                continue
            if target.stored(schema_id) != source.stored(schema_id):
                log.error("schema registry: id %d means another schema in the target registry (registered there, "
                          "not copied): subject %s version %d is not copied", schema_id, subject, version)
                continue
            target.import_version(subject, version, schema_id, deleted)
            versions += 1
        gone = [v for v, (_, deleted) in have.items() if v not in wanted and deleted]
        if gone:
            deletion = SubjectDeletion(target, honour_mode=False)
            for version in gone:
                deletion.delete_version(subject, version, permanent=True)
                versions += 1
    if ids or versions:
        log.info("schema registry: copied %d id(s) and %d subject version change(s)", ids, versions)
    return ReplicationResult(ids, versions)


def _children(client, path: str) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        return client.get_children(path)
    except NoNodeError:
        return []


def _int_or_max(text: str) -> int:
    return int(text) if text.isdigit() else 1 << 62
