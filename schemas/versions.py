"""A subject's versions: the SchemaVersion a lookup answers, subject names, and a version znode's bytes
(the schema id, marked ",deleted" once the version is soft-deleted)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ferry.schemas.canonical import AvroSchema
from ferry.schemas.errors import InvalidSubjectError
from ferry.schemas.schema_types import AVRO, TypedSchema

_SUBJECT_RE = re.compile(r"^[A-Za-z0-9._:-]{1,255}$")


@dataclass(frozen=True)
class SchemaVersion:
    subject: str
    version: int
    id: int
    schema: AvroSchema  # Avro: the canonical JSON value (dict, list or name); JSON/PROTOBUF: the canonical text
    schema_type: str = AVRO
    deleted: bool = False


def version_data(schema_id: int, deleted: bool = False) -> bytes:
    """A version znode's bytes: the id, marked once the version is soft-deleted."""
    return f"{schema_id},deleted".encode() if deleted else str(schema_id).encode()


def parse_version_data(data: bytes) -> tuple[int, bool]:
    text = data.decode()
    return int(text.split(",", 1)[0]), text.endswith(",deleted")


def version_of(subject: str, version: int, schema_id: int, typed: TypedSchema, deleted: bool = False
                ) -> SchemaVersion:
    schema = typed.value if typed.schema_type == AVRO else typed.text
    return SchemaVersion(subject, version, schema_id, schema, typed.schema_type, deleted)

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
