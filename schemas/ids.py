"""Schema ids in ZooKeeper: the stored schema of each id, the fingerprint index that finds an id again, and
handing out new ids (or importing given ones) without two schemas ever sharing one.

A new id is taken in one ZooKeeper transaction that bumps the counter (compare-and-set on its version),
creates the id node and creates the fingerprint node: two registrants of different schemas cannot get the
same id, two registrants of the same schema cannot get two ids, and a failed attempt leaves nothing behind.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from ferry.schemas.errors import OperationNotPermittedError, SchemaError, UnknownSchemaError
from ferry.schemas.schema_types import TypedSchema

ROOT = "/schemas"
IDS = f"{ROOT}/ids"
FINGERPRINTS = f"{ROOT}/fingerprints"
COUNTER = f"{ROOT}/counter"
_MAX_ATTEMPTS = 50


class SchemaIds:
    """The id -> schema store of one registry (ids never change meaning once given)."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client

    def stored(self, schema_id: int) -> bytes:
        """The bytes stored for this id (what the mirror copies)."""
        if isinstance(schema_id, bool) or not isinstance(schema_id, int) or schema_id < 1:
            raise UnknownSchemaError(f"schema id {schema_id!r} is not registered (ids are integers from 1)")
        try:
            data, _ = self._client.get(f"{IDS}/{schema_id}")
        except NoNodeError:
            raise UnknownSchemaError(f"schema id {schema_id} is not registered") from None
        return data

    def import_schema(self, schema_id: int, typed: TypedSchema) -> None:
        """Store ``schema`` under a given id (copying another cluster's registry, ids preserved).

        Refuses an id already holding a different schema. Keeps the counter past every imported id so
        that ids allocated here never collide with imported ones.
        """
        for _ in range(_MAX_ATTEMPTS):
            try:
                current, _ = self._client.get(f"{IDS}/{schema_id}")
                if current != typed.stored:
                    raise OperationNotPermittedError(f"schema id {schema_id} already holds a different schema here")
                return
            except NoNodeError:
                pass
            data, stat = self._client.get(COUNTER)
            tx = self._client.transaction()
            tx.set_data(COUNTER, str(max(int(data or b"0"), schema_id)).encode(), version=stat.version)
            tx.create(f"{IDS}/{schema_id}", typed.stored)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                try:
                    self._client.create(f"{FINGERPRINTS}/{typed.fingerprint}", str(schema_id).encode())
                except NodeExistsError:
                    pass
                return
        raise SchemaError(f"could not import schema id {schema_id}: the id counter kept changing")

    def id_of(self, typed: TypedSchema) -> int | None:
        try:
            data, _ = self._client.get(f"{FINGERPRINTS}/{typed.fingerprint}")
        except NoNodeError:
            return None
        return int(data)

    def allocate(self, typed: TypedSchema) -> int:
        fp_path = f"{FINGERPRINTS}/{typed.fingerprint}"
        for _ in range(_MAX_ATTEMPTS):
            data, stat = self._client.get(COUNTER)
            new_id = int(data or b"0") + 1
            tx = self._client.transaction()
            tx.set_data(COUNTER, str(new_id).encode(), version=stat.version)
            tx.create(f"{IDS}/{new_id}", typed.stored)
            tx.create(fp_path, str(new_id).encode())
            results = tx.commit()
            errors = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not errors:
                return new_id
            if isinstance(results[2], NodeExistsError):
                existing = self.id_of(typed)  # the same schema was registered meanwhile
                if existing is not None:
                    return existing
            if not any(isinstance(e, (BadVersionError, NodeExistsError)) for e in errors):
                raise SchemaError(f"allocating a schema id failed: {errors[0]!r}")
        raise SchemaError("could not allocate a schema id: the id counter kept changing")
