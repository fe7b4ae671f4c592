"""The Avro schema registry, kept in ZooKeeper under the cluster's chroot (paper section 4).

Layout (relative to the chroot)::

    /schemas/ids/<id>                              canonical schema JSON (immutable)
    /schemas/fingerprints/<sha256>                 id of that canonical schema
    /schemas/counter                               the last id handed out
    /schemas/subjects/<subject>/versions/<n>       id of version n (1, 2, ...)
    /schemas/config                                {"compatibility": LEVEL}  (the default for every subject)
    /schemas/config/<subject>                      {"compatibility": LEVEL}  (a per-subject override)

A new id is taken in one ZooKeeper transaction that bumps the counter (compare-and-set on its
version), creates the id node and creates the fingerprint node: two registrants of different schemas
cannot get the same id, two registrants of the same schema cannot get two ids, and a failed attempt
leaves nothing behind. Versions are created with create() on the next number, so a concurrent
registration under the same subject loses the race cleanly, re-reads and re-checks compatibility.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass

from fastavro.schema import parse_schema
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from ferry.schemas.canonical import AvroSchema, canonical_json, fingerprint, load_schema, parse_canonical
from ferry.schemas.compatibility import DEFAULT_LEVEL, compatibility_problems, normalise_level
from ferry.schemas.errors import (
    IncompatibleSchemaError,
    InvalidSubjectError,
    SchemaError,
    UnknownSchemaError,
    UnknownSubjectError,
)
from ferry.zk import ClusterRegistry, connect

ROOT = "/schemas"
IDS = f"{ROOT}/ids"
FINGERPRINTS = f"{ROOT}/fingerprints"
COUNTER = f"{ROOT}/counter"
SUBJECTS = f"{ROOT}/subjects"
CONFIG = f"{ROOT}/config"

_SUBJECT_RE = re.compile(r"^[A-Za-z0-9._:-]{1,255}$")
_MAX_ATTEMPTS = 50


@dataclass(frozen=True)
class SchemaVersion:
    subject: str
    version: int
    id: int
    schema: AvroSchema  # canonical JSON value (dict, list or primitive name)

def subject_for_topic(topic: str) -> str:
    """The subject a topic's message values are registered under: the topic name itself."""
    return topic


def validate_subject(subject: object) -> str:
    if not isinstance(subject, str) or not _SUBJECT_RE.match(subject) or subject in (".", ".."):
        raise InvalidSubjectError(
            f"subject {subject!r} is not allowed: use 1-255 ASCII letters, digits, '.', '_', ':' or '-' "
            "(not '.' or '..')"
        )
    return subject


class SchemaRegistry:
    """Register and look up Avro schemas of one cluster.

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
        self._by_id: dict[int, AvroSchema] = {}
        self._parsed: dict[int, AvroSchema] = {}
        self._lock = threading.Lock()
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
    def register(self, subject: str, schema: str | bytes | dict | list) -> int:
        """Register ``schema`` under ``subject`` and return its id.

        The same schema again (under any subject) has the same id; registering a subject's existing
        schema adds no version. A schema that breaks the subject's compatibility level raises
        IncompatibleSchemaError naming each offending field.
        """
        return self.register_version(subject, schema).id

    def register_version(self, subject: str, schema: str | bytes | dict | list) -> SchemaVersion:
        """Like register(), returning the subject version the schema now has."""
        validate_subject(subject)
        canonical = load_schema(schema)
        for _ in range(_MAX_ATTEMPTS):
            existing = self._versions_with_ids(subject)
            schema_id = self._id_of(canonical)
            if schema_id is not None:
                for version, vid in existing:
                    if vid == schema_id:
                        return SchemaVersion(subject, version, vid, self.get(vid))
            self._check(subject, canonical, existing)
            if schema_id is None:
                schema_id = self._allocate_id(canonical)
            version = existing[-1][0] + 1 if existing else 1
            try:
                self._client.create(f"{SUBJECTS}/{subject}/versions/{version}", str(schema_id).encode(),
                                    makepath=True)
            except NodeExistsError:
                continue  # someone registered under this subject meanwhile: re-read and re-check
            return SchemaVersion(subject, version, schema_id, canonical)
        raise SchemaError(f"subject {subject!r} kept changing during registration; try again")

    def check(self, subject: str, schema: str | bytes | dict | list) -> list[str]:
        """Problems that would stop ``schema`` from being registered under ``subject`` (empty: none)."""
        validate_subject(subject)
        canonical = load_schema(schema)
        existing = self._versions_with_ids(subject)
        schema_id = self._id_of(canonical)
        if schema_id is not None and any(vid == schema_id for _, vid in existing):
            return []
        level = self.compatibility(subject)
        return compatibility_problems(level, canonical, self._previous(subject, existing))

    # ----------------------------------------------------------------- lookups
    def get(self, schema_id: int) -> AvroSchema:
        """The canonical schema (JSON value) with this id; cached, since ids never change meaning."""
        cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        if isinstance(schema_id, bool) or not isinstance(schema_id, int) or schema_id < 1:
            raise UnknownSchemaError(f"schema id {schema_id!r} is not registered (ids are integers from 1)")
        try:
            data, _ = self._client.get(f"{IDS}/{schema_id}")
        except NoNodeError:
            raise UnknownSchemaError(f"schema id {schema_id} is not registered") from None
        schema = parse_canonical(data)
        with self._lock:
            self._by_id[schema_id] = schema
        return schema

    def parsed(self, schema_id: int) -> AvroSchema:
        """The fastavro-parsed schema with this id (for fastavro readers/writers); cached."""
        cached = self._parsed.get(schema_id)
        if cached is None:
            cached = parse_schema(self.get(schema_id))
            with self._lock:
                self._parsed[schema_id] = cached
        return cached

    def id_of(self, schema: str | bytes | dict | list) -> int | None:
        """The id of ``schema`` if it was ever registered (under any subject)."""
        return self._id_of(load_schema(schema))

    def subjects(self) -> list[str]:
        try:
            return sorted(self._client.get_children(SUBJECTS))
        except NoNodeError:
            return []

    def lookup(self, subject: str, schema: str | bytes | dict | list) -> SchemaVersion | None:
        """The version of ``subject`` holding ``schema``, if it was registered there."""
        validate_subject(subject)
        canonical = load_schema(schema)
        schema_id = self._id_of(canonical)
        if schema_id is None:
            return None
        for version, vid in self._versions_with_ids(subject):
            if vid == schema_id:
                return SchemaVersion(subject, version, vid, self.get(vid))
        return None

    def versions(self, subject: str) -> list[int]:
        """The subject's version numbers, ascending; raises UnknownSubjectError if it has none."""
        versions = [v for v, _ in self._versions_with_ids(validate_subject(subject))]
        if not versions:
            raise UnknownSubjectError(f"no schema is registered under subject {subject!r}")
        return versions

    def version(self, subject: str, version: int) -> SchemaVersion:
        validate_subject(subject)
        try:
            data, _ = self._client.get(f"{SUBJECTS}/{subject}/versions/{int(version)}")
        except NoNodeError:
            known = self.versions(subject)
            raise UnknownSubjectError(
                f"subject {subject!r} has no version {version} (versions: {', '.join(map(str, known))})"
            ) from None
        schema_id = int(data)
        return SchemaVersion(subject, int(version), schema_id, self.get(schema_id))

    def latest(self, subject: str) -> SchemaVersion:
        return self.version(subject, self.versions(subject)[-1])

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

    # ----------------------------------------------------------------- replication (the mirror)
    def import_schema(self, schema_id: int, schema: AvroSchema) -> None:
        """Store ``schema`` under a given id (copying another cluster's registry, ids preserved).

        Refuses an id already holding a different schema. Keeps the counter past every imported id so
        that ids allocated here never collide with imported ones.
        """
        canonical = load_schema(schema)
        text = canonical_json(canonical).encode()
        try:
            current, _ = self._client.get(f"{IDS}/{schema_id}")
            if parse_canonical(current) != canonical:
                raise SchemaError(f"schema id {schema_id} already holds a different schema here")
            return
        except NoNodeError:
            pass
        for _ in range(_MAX_ATTEMPTS):
            data, stat = self._client.get(COUNTER)
            tx = self._client.transaction()
            tx.set_data(COUNTER, str(max(int(data or b"0"), schema_id)).encode(), version=stat.version)
            tx.create(f"{IDS}/{schema_id}", text)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                try:
                    self._client.create(f"{FINGERPRINTS}/{fingerprint(canonical)}", str(schema_id).encode())
                except NodeExistsError:
                    pass
                return
            if isinstance(results[1], NodeExistsError):
                return self.import_schema(schema_id, schema)  # created meanwhile: compare once more
        raise SchemaError(f"could not import schema id {schema_id}: the id counter kept changing")

    def import_version(self, subject: str, version: int, schema_id: int) -> None:
        """Record ``subject`` version ``version`` → ``schema_id`` (the id must exist here)."""
        validate_subject(subject)
        self.get(schema_id)
        path = f"{SUBJECTS}/{subject}/versions/{int(version)}"
        try:
            self._client.create(path, str(schema_id).encode(), makepath=True)
        except NodeExistsError:
            data, _ = self._client.get(path)
            if int(data) != schema_id:
                raise SchemaError(
                    f"subject {subject!r} version {version} is id {int(data)} here, not {schema_id}"
                ) from None

    # ----------------------------------------------------------------- internals
    def _versions_with_ids(self, subject: str) -> list[tuple[int, int]]:
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
            out.append((int(child), int(data)))
        return sorted(out)

    def _previous(self, subject: str, existing: list[tuple[int, int]]) -> list[tuple[str, AvroSchema]]:
        return [(f"version {v} [id {sid}]", self.get(sid)) for v, sid in existing]

    def _check(self, subject: str, canonical: AvroSchema, existing: list[tuple[int, int]]) -> None:
        if not existing:
            return
        level = self.compatibility(subject)
        problems = compatibility_problems(level, canonical, self._previous(subject, existing))
        if problems:
            raise IncompatibleSchemaError(
                f"schema refused for subject {subject!r} ({level} compatibility):\n  - " + "\n  - ".join(problems),
                problems,
            )

    def _id_of(self, canonical: AvroSchema) -> int | None:
        try:
            data, _ = self._client.get(f"{FINGERPRINTS}/{fingerprint(canonical)}")
        except NoNodeError:
            return None
        return int(data)

    def _allocate_id(self, canonical: AvroSchema) -> int:
        text = canonical_json(canonical).encode()
        fp_path = f"{FINGERPRINTS}/{fingerprint(canonical)}"
        for _ in range(_MAX_ATTEMPTS):
            data, stat = self._client.get(COUNTER)
            new_id = int(data or b"0") + 1
            tx = self._client.transaction()
            tx.set_data(COUNTER, str(new_id).encode(), version=stat.version)
            tx.create(f"{IDS}/{new_id}", text)
            tx.create(fp_path, str(new_id).encode())
            results = tx.commit()
            errors = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not errors:
                with self._lock:
                    self._by_id[new_id] = canonical
                return new_id
            if isinstance(results[2], NodeExistsError):
                existing = self._id_of(canonical)  # the same schema was registered meanwhile
                if existing is not None:
                    return existing
            if not any(isinstance(e, (BadVersionError, NodeExistsError)) for e in errors):
                raise SchemaError(f"allocating a schema id failed: {errors[0]!r}")
        raise SchemaError("could not allocate a schema id: the id counter kept changing")

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
