"""The schema registry (Avro, JSON Schema, Protobuf), kept in ZooKeeper under the cluster's chroot (paper section 4).

Layout (relative to the chroot)::

    /schemas/ids/<id>                              canonical schema (immutable; see schema_types.py)
    /schemas/fingerprints/<sha256>                 id of that canonical schema
    /schemas/counter                               the last id handed out
    /schemas/subjects/<subject>/versions/<n>       id of version n (1, 2, ...); "<id>,deleted" once soft-deleted
    /schemas/config                                {"compatibility": LEVEL}  (the default for every subject)
    /schemas/config/<subject>                      {"compatibility": LEVEL}  (a per-subject override)
    /schemas/mode[/<subject>]                      {"mode": MODE}  (modes.py)

Ids are handed out by ids.py (one transaction per new id). Versions are created with create() on the next number, so a concurrent
registration under the same subject loses the race cleanly, re-reads and re-checks compatibility.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

from fastavro.schema import parse_schema
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ferry.schemas.canonical import AvroSchema
from ferry.schemas.compatibility import DEFAULT_LEVEL, normalise_level
from ferry.schemas.errors import (
    IncompatibleSchemaError,
    OperationNotPermittedError,
    SchemaError,
    UnknownSubjectError,
    UnknownVersionError,
)
from ferry.schemas.ids import COUNTER, FINGERPRINTS, IDS, ROOT, SchemaIds
from ferry.schemas.modes import RegistryModes
from ferry.schemas.references import SchemaReference
from ferry.schemas.referencing import ReferenceLinks
from ferry.schemas.schema_types import AVRO, TypedSchema, from_stored, parse_typed, typed_problems
from ferry.schemas.versions import (
    SchemaVersion,
    parse_version_data,
    subject_for_topic,
    validate_subject,
    version_data,
    version_of,
)
from ferry.zk import ClusterRegistry, connect

__all__ = ["COUNTER", "FINGERPRINTS", "IDS", "SchemaRegistry", "SchemaVersion", "parse_version_data", "subject_for_topic", "validate_subject",
           "version_data"]

SUBJECTS = f"{ROOT}/subjects"
References = Sequence[SchemaReference] | Sequence[dict] | None
CONFIG = f"{ROOT}/config"
_MAX_ATTEMPTS = 50


class SchemaRegistry:
    """Register and look up schemas (Avro, JSON Schema, Protobuf) of one cluster.

    ``SchemaRegistry("127.0.0.1:2181/ferry/live")`` opens (and ``close()`` closes) its own session;
    ``SchemaRegistry(kazoo_client)`` or ``SchemaRegistry(cluster_registry)`` shares one (already
    rooted at the cluster chroot) and leaves it open.
    """

    def __init__(self, zk: str | KazooClient | ClusterRegistry, timeout: float = 10.0, read_only: bool = False
                 ) -> None:
        if isinstance(zk, str):
            self._client = connect(zk, timeout=timeout, create_chroot=not read_only)
            self._owns_client = True
        elif isinstance(zk, KazooClient):
            self._client, self._owns_client = zk, False
        elif isinstance(zk, ClusterRegistry):
            self._client, self._owns_client = zk.client, False
        else:
            raise TypeError("SchemaRegistry needs a ZooKeeper connect string, a KazooClient or a ClusterRegistry")
        self._by_id: dict[int, TypedSchema] = {}
        self._parsed: dict[int, AvroSchema] = {}
        self._lock = threading.Lock()
        self.modes = RegistryModes(self._client)
        self.ids = SchemaIds(self._client)
        self.references = ReferenceLinks(self)
        if read_only:  # a look from a tool: leave no znodes behind (e.g. under a mistyped chroot)
            return
        for path in (IDS, FINGERPRINTS, SUBJECTS, CONFIG):
            self._client.ensure_path(path)
        try:
            self._client.create(COUNTER, b"0")
        except NodeExistsError:
            pass

    @property
    def client(self) -> KazooClient:
        """The kazoo client (rooted at the cluster chroot) this registry uses."""
        return self._client

    def close(self) -> None:
        if self._owns_client:
            self._client.stop()
            self._client.close()

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- registering
    def register(self, subject: str, schema: str | bytes | dict | list, schema_type: str = AVRO) -> int:
        """Register ``schema`` under ``subject`` and return its id.

        The same schema again (under any subject) has the same id; registering a subject's existing
        schema adds no version. A schema that breaks the subject's compatibility level raises
        IncompatibleSchemaError naming each offending field.
        """
        return self.register_version(subject, schema, schema_type).id

    def register_version(self, subject: str, schema: str | bytes | dict | list, schema_type: str = AVRO,
                         schema_id: int | None = None, version: int | None = None,
                         references: References = ()) -> SchemaVersion:
        """Like register(), returning the subject version the schema now has.

        ``schema_id``/``version`` (IMPORT mode only) register under a given id and version number, as a
        migration from another registry needs; IMPORT mode skips compatibility checks.
        """
        validate_subject(subject)
        typed = self.parse(schema, schema_type, references)
        mode = self.modes.mode(subject)
        if mode.startswith("READONLY"):
            raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")
        if (schema_id is not None or version is not None) and mode != "IMPORT":
            raise OperationNotPermittedError(
                f"Subject {subject} is not in import mode: registering with a given id or version needs IMPORT")
        for _ in range(_MAX_ATTEMPTS):
            entries = self.version_entries(subject)
            live = [(v, sid) for v, sid, deleted in entries if not deleted]
            known_id = self._id_of(typed)
            if schema_id is not None and known_id not in (None, schema_id):
                raise OperationNotPermittedError(f"Overwrite new schema with id {schema_id} is not permitted: "
                                                 f"the schema is registered as id {known_id}")
            if known_id is not None:
                for v, vid in live:
                    if vid == known_id and version in (None, v):
                        return version_of(subject, v, vid, typed)
            if mode != "IMPORT":
                self._check(subject, typed, live)
            if schema_id is not None:
                self.import_schema(schema_id, typed)
                new_id = schema_id
            else:
                new_id = known_id if known_id is not None else self._allocate_id(typed)
            number = version if version is not None else (entries[-1][0] + 1 if entries else 1)
            try:
                self._client.create(f"{SUBJECTS}/{subject}/versions/{number}", version_data(new_id), makepath=True)
            except NodeExistsError:
                if version is not None:
                    raise OperationNotPermittedError(
                        f"Subject {subject} already has a version {version} with another schema") from None
                continue  # someone registered under this subject meanwhile: re-read and re-check
            return version_of(subject, number, new_id, typed)
        raise SchemaError(f"subject {subject!r} kept changing during registration; try again")

    def check(self, subject: str, schema: str | bytes | dict | list, schema_type: str = AVRO,
              references: References = ()) -> list[str]:
        """Problems that would stop ``schema`` from being registered under ``subject`` (empty: none)."""
        validate_subject(subject)
        typed = self.parse(schema, schema_type, references)
        live = [(v, sid) for v, sid, deleted in self.version_entries(subject) if not deleted]
        schema_id = self._id_of(typed)
        if schema_id is not None and any(vid == schema_id for _, vid in live):
            return []
        return typed_problems(self.compatibility(subject), typed, self._previous(live))

    # ----------------------------------------------------------------- lookups
    def get(self, schema_id: int) -> AvroSchema:
        """The canonical Avro schema (JSON value) with this id; cached, since ids never change meaning."""
        typed = self.get_typed(schema_id)
        if typed.schema_type != AVRO:
            raise SchemaError(f"schema id {schema_id} is a {typed.schema_type} schema, not Avro")
        return typed.value

    def get_typed(self, schema_id: int) -> TypedSchema:
        """The schema (any type) with this id; cached."""
        cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        typed = from_stored(self.stored(schema_id), self.references.resolve)
        with self._lock:
            self._by_id[schema_id] = typed
        return typed

    def stored(self, schema_id: int) -> bytes:
        """The bytes stored for this id (what the mirror copies)."""
        return self.ids.stored(schema_id)

    def parsed(self, schema_id: int) -> AvroSchema:
        """The fastavro-parsed schema with this id (for fastavro readers/writers); cached."""
        cached = self._parsed.get(schema_id)
        if cached is None:
            cached = parse_schema(self.get(schema_id))
            with self._lock:
                self._parsed[schema_id] = cached
        return cached

    def id_of(self, schema: str | bytes | dict | list, schema_type: str = AVRO, references: References = ()
              ) -> int | None:
        """The id of ``schema`` if it was ever registered (under any subject)."""
        return self._id_of(self.parse(schema, schema_type, references))

    def parse(self, schema: str | bytes | dict | list, schema_type: str = AVRO, references: References = ()
              ) -> TypedSchema:
        """``schema`` validated and canonical, its references pinned and resolved in this registry."""
        return parse_typed(schema, schema_type, self.references.pin(references), self.references.resolve)

    def subjects(self, deleted: bool = False) -> list[str]:
        """Subjects with a live version (``deleted=True``: with any version, soft-deleted ones included)."""
        try:
            children = self._client.get_children(SUBJECTS)
        except NoNodeError:
            return []
        return sorted(s for s in children if any(deleted or not d for _, _, d in self.version_entries(s)))

    def lookup(self, subject: str, schema: str | bytes | dict | list, schema_type: str = AVRO,
               deleted: bool = False, references: References = ()) -> SchemaVersion | None:
        """The version of ``subject`` holding ``schema``, if it was registered there."""
        validate_subject(subject)
        typed = self.parse(schema, schema_type, references)
        schema_id = self._id_of(typed)
        if schema_id is None:
            return None
        for version, vid, is_deleted in reversed(self.version_entries(subject)):
            if vid == schema_id and (deleted or not is_deleted):
                return version_of(subject, version, vid, typed, is_deleted)
        return None

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        """The subject's version numbers, ascending; raises UnknownSubjectError if it has none."""
        versions = [v for v, _, d in self.version_entries(validate_subject(subject)) if deleted or not d]
        if not versions:
            raise UnknownSubjectError(f"no schema is registered under subject {subject!r}")
        return versions

    def version(self, subject: str, version: int, deleted: bool = False) -> SchemaVersion:
        validate_subject(subject)
        try:
            data, _ = self._client.get(f"{SUBJECTS}/{subject}/versions/{int(version)}")
            schema_id, is_deleted = parse_version_data(data)
        except NoNodeError:
            schema_id, is_deleted = 0, True
        if is_deleted and (not deleted or not schema_id):
            known = self.versions(subject)
            raise UnknownVersionError(
                f"subject {subject!r} has no version {version} (versions: {', '.join(map(str, known))})")
        return version_of(subject, int(version), schema_id, self.get_typed(schema_id), is_deleted)

    def latest(self, subject: str) -> SchemaVersion:
        return self.version(subject, self.versions(subject)[-1])

    def version_entries(self, subject: str) -> list[tuple[int, int, bool]]:
        """(version, id, soft-deleted) of every version the subject has, ascending."""
        base = f"{SUBJECTS}/{subject}/versions"
        try:
            children = self._client.get_children(base)
        except NoNodeError:
            return []
        out = []
        for child in children:
            if not child.isdigit():
                continue
            try:
                data, _ = self._client.get(f"{base}/{child}")
            except NoNodeError:
                continue
            out.append((int(child), *parse_version_data(data)))
        return sorted(out)

    def set_mode(self, mode: str, subject: str | None = None, force: bool = False) -> str:
        """Set the registry's or a subject's mode (IMPORT only where nothing is registered, unless ``force``)."""
        if subject is None:
            has_schemas = bool(self.subjects(deleted=True))
        else:
            has_schemas = bool(self.version_entries(validate_subject(subject)))
        return self.modes.set_mode(mode, subject, force, has_schemas)

    # ----------------------------------------------------------------- compatibility config
    def compatibility(self, subject: str | None = None) -> str:
        """The level that applies to ``subject`` (its override, else the registry default, else BACKWARD)."""
        if subject is not None:
            level = self._read_level(f"{CONFIG}/{validate_subject(subject)}")
            if level is not None:
                return level
        return self._read_level(CONFIG) or DEFAULT_LEVEL

    def compatibility_override(self, subject: str) -> str | None:
        return self._read_level(f"{CONFIG}/{validate_subject(subject)}")

    def set_compatibility(self, level: str | None, subject: str | None = None) -> None:
        """Set the default level (subject None) or a subject's override; ``level=None`` removes an override."""
        path = CONFIG if subject is None else f"{CONFIG}/{validate_subject(subject)}"
        if level is None:
            if subject is None:
                self._client.set(CONFIG, b"")
            else:
                try:
                    self._client.delete(path)
                except NoNodeError:
                    pass
            return
        data = json.dumps({"compatibility": normalise_level(level)}).encode()
        try:
            self._client.create(path, data)
        except NodeExistsError:
            self._client.set(path, data)

    # ----------------------------------------------------------------- replication (the mirror), IMPORT
    def import_schema(self, schema_id: int, schema: TypedSchema | AvroSchema) -> None:
        """Store ``schema`` under a given id (copying another cluster's registry, ids preserved); refuses an id
        already holding a different schema, and keeps the counter past every imported id."""
        self.ids.import_schema(schema_id, schema if isinstance(schema, TypedSchema) else parse_typed(schema, AVRO))

    def import_version(self, subject: str, version: int, schema_id: int, deleted: bool = False) -> None:
        """Record ``subject`` version ``version`` → ``schema_id`` (the id must exist here), soft-deleted or not."""
        validate_subject(subject)
        self.stored(schema_id)
        path = f"{SUBJECTS}/{subject}/versions/{int(version)}"
        try:
            self._client.create(path, version_data(schema_id, deleted), makepath=True)
        except NodeExistsError:
            data, stat = self._client.get(path)
            here, here_deleted = parse_version_data(data)
            if here != schema_id:
                raise SchemaError(
                    f"subject {subject!r} version {version} is id {here} here, not {schema_id}") from None
            if here_deleted != deleted:
                self._client.set(path, version_data(schema_id, deleted), version=stat.version)

    # ----------------------------------------------------------------- internals
    def _previous(self, live: list[tuple[int, int]]) -> list[tuple[str, TypedSchema]]:
        return [(f"version {v} [id {sid}]", self.get_typed(sid)) for v, sid in live]

    def _check(self, subject: str, typed: TypedSchema, live: list[tuple[int, int]]) -> None:
        if not live:
            return
        level = self.compatibility(subject)
        problems = typed_problems(level, typed, self._previous(live))
        if problems:
            raise IncompatibleSchemaError(
                f"schema refused for subject {subject!r} ({level} compatibility):\n  - " + "\n  - ".join(problems),
                problems,
            )

    def _id_of(self, typed: TypedSchema) -> int | None:
        return self.ids.id_of(typed)

    def _allocate_id(self, typed: TypedSchema) -> int:
        new_id = self.ids.allocate(typed)
        with self._lock:
            self._by_id[new_id] = typed
        return new_id

    def _read_level(self, path: str) -> str | None:
        try:
            data, _ = self._client.get(path)
        except NoNodeError:
            return None
        if not data:
            return None
        try:
            return normalise_level(json.loads(data)["compatibility"])
        except (ValueError, KeyError, TypeError):
            return None
