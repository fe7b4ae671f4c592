"""The three schema types a subject can hold (AVRO, JSON, PROTOBUF): parsing, stored form, compatibility.

An Avro schema is stored as its canonical JSON (as ferry always has, so existing ids keep their bytes);
a JSON Schema or Protobuf schema is stored as ``{"schema": "<canonical text>", "schemaType": "JSON"}``,
which can never be an Avro schema (Avro needs a "type"). The id of a schema is found by the SHA-256
of these stored bytes, so the same text under two types gets two ids.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from ferry.schemas.canonical import canonical_json, load_schema, parse_canonical
from ferry.schemas.compatibility import compatibility_problems, normalise_level
from ferry.schemas.errors import SchemaParseError
from ferry.schemas.json_schema import json_reader_problems, load_json_schema
from ferry.schemas.protobuf_schema import load_protobuf, protobuf_problems, serialized

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_TYPES = (JSON, PROTOBUF, AVRO)  # the order Confluent's GET /schemas/types answers


@dataclass(frozen=True)
class TypedSchema:
    """A parsed schema: its type, canonical text and the parsed value the compatibility rules walk."""

    schema_type: str
    text: str
    value: object = field(compare=False, repr=False)

    @property
    def stored(self) -> bytes:
        if self.schema_type == AVRO:
            return self.text.encode()
        return json.dumps({"schema": self.text, "schemaType": self.schema_type}, sort_keys=True).encode()

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.stored).hexdigest()

    def serialized(self) -> str:
        """The text for ``?format=serialized``: a base64 FileDescriptorProto for Protobuf, else the text."""
        return serialized(self.value) if self.schema_type == PROTOBUF else self.text


def normalise_type(schema_type: object) -> str:
    kind = AVRO if schema_type in (None, "") else schema_type
    if not isinstance(kind, str) or kind.upper() not in SCHEMA_TYPES:
        raise SchemaParseError(f"Invalid schema type {schema_type!r}: use one of {', '.join(SCHEMA_TYPES)}")
    return kind.upper()


def parse_typed(schema: str | bytes | dict | list, schema_type: str = AVRO) -> TypedSchema:
    """Validate ``schema`` as ``schema_type`` and return it in canonical form."""
    kind = normalise_type(schema_type)
    if kind == AVRO:
        value = load_schema(schema)
        return TypedSchema(AVRO, canonical_json(value), value)
    if isinstance(schema, bytes):
        schema = schema.decode("utf-8", errors="replace")
    if kind == JSON:
        text, value = load_json_schema(schema if isinstance(schema, str) else json.dumps(schema))
        return TypedSchema(JSON, text, value)
    if not isinstance(schema, str):
        raise SchemaParseError("Invalid Protobuf schema: give the .proto text or a base64 FileDescriptorProto")
    text, descriptor = load_protobuf(schema)
    return TypedSchema(PROTOBUF, text, descriptor)


def from_stored(data: bytes) -> TypedSchema:
    """A stored schema (a ZooKeeper id node's bytes) back to its parsed form."""
    value = parse_canonical(data)
    if isinstance(value, dict) and set(value) == {"schema", "schemaType"}:
        return parse_typed(value["schema"], value["schemaType"])
    return TypedSchema(AVRO, data.decode(), value)



def typed_problems(level: str, new: TypedSchema, previous: list[tuple[str, TypedSchema]]) -> list[str]:
    """Problems of registering ``new`` after ``previous`` ([(label, schema)], oldest first) at ``level``."""
    level = normalise_level(level)
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    changed = [f"schema type changed from {old.schema_type} ({label}) to {new.schema_type}"
               for label, old in against if old.schema_type != new.schema_type]
    if changed:
        return changed
    if new.schema_type == AVRO:
        return compatibility_problems(level, new.value, [(label, old.value) for label, old in against])
    problems: list[str] = []
    for label, old in reversed(against):
        if new.schema_type == PROTOBUF:
            problems += protobuf_problems(new.value, old.value, label)
            continue
        if level.startswith(("BACKWARD", "FULL")):
            problems += json_reader_problems(new.value, old.value, "the new schema", label)
        if level.startswith(("FORWARD", "FULL")):
            problems += json_reader_problems(old.value, new.value, label, "the new schema")
    return problems
