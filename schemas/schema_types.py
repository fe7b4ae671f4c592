"""The three schema types a subject can hold (AVRO, JSON, PROTOBUF): parsing, stored form, compatibility.

An Avro schema is stored as its canonical JSON (as ferry always has, so existing ids keep their bytes);
a JSON Schema or Protobuf schema is stored as ``{"schema": "<canonical text>", "schemaType": "JSON"}``,
which can never be an Avro schema (Avro needs a "type"); a schema with references (of any type) adds
``"references": [{name, subject, version}]`` to that form (references.py). The id of a schema is found by the SHA-256
of these stored bytes, so the same text under two types gets two ids.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ferry.schemas.canonical import canonical_json, load_schema, parse_canonical
from ferry.schemas.compatibility import compatibility_problems, named_types, normalise_level
from ferry.schemas.errors import SchemaParseError
from ferry.schemas.json_schema import json_reader_problems, load_json_schema
from ferry.schemas.protobuf_schema import load_protobuf, protobuf_problems, serialized
from ferry.schemas.references import (
    SchemaReference,
    inline_avro,
    inline_json,
    parse_references,
    stored_references,
)

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_TYPES = (JSON, PROTOBUF, AVRO)  # the order Confluent's GET /schemas/types answers


@dataclass(frozen=True)
class TypedSchema:
    """A parsed schema: its type, canonical text and the parsed value the compatibility rules walk.

    With references, ``value`` has the referenced definitions inlined (Avro named types, JSON ``$ref``s) so
    it stands alone; ``text`` stays as registered. ``dependencies`` are the referenced schemas, transitively,
    dependencies first, by reference name."""

    schema_type: str
    text: str
    value: object = field(compare=False, repr=False)
    references: tuple[SchemaReference, ...] = ()
    dependencies: tuple[tuple[str, TypedSchema], ...] = field(default=(), compare=False, repr=False)

    @property
    def stored(self) -> bytes:
        if self.schema_type == AVRO and not self.references:
            return self.text.encode()
        body: dict[str, object] = {"schema": self.text, "schemaType": self.schema_type}
        if self.references:
            body["references"] = stored_references(self.references)
        return json.dumps(body, sort_keys=True).encode()

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


Resolver = Callable[[SchemaReference], TypedSchema]  # a pinned reference -> the schema it names (the registry)


def parse_typed(schema: str | bytes | dict | list, schema_type: str = AVRO,
                references: Sequence[SchemaReference] | None = (), resolve: Resolver | None = None) -> TypedSchema:
    """Validate ``schema`` as ``schema_type`` and return it in canonical form; its ``references`` (pinned to
    version numbers) are looked up with ``resolve``."""
    kind = normalise_type(schema_type)
    refs = parse_references(references)
    deps = _dependencies(refs, resolve, kind)
    if kind == AVRO:
        if not refs:
            value = load_schema(schema)
            return TypedSchema(AVRO, canonical_json(value), value)
        named: dict = {}
        definitions: dict[str, object] = {}
        for _, dep in deps:
            raw = json.loads(dep.text)
            load_schema(raw, named)
            definitions.update(named_types(raw))
        main = load_schema(schema, dict(named))
        return TypedSchema(AVRO, canonical_json(main), inline_avro(main, definitions), refs, deps)
    if isinstance(schema, bytes):
        schema = schema.decode("utf-8", errors="replace")
    if kind == JSON:
        text, value = load_json_schema(schema if isinstance(schema, str) else json.dumps(schema))
        if refs:
            value = inline_json(value, {name: dep.value for name, dep in deps})
        return TypedSchema(JSON, text, value, refs, deps)
    if not isinstance(schema, str):
        raise SchemaParseError("Invalid Protobuf schema: give the .proto text or a base64 FileDescriptorProto")
    text, descriptor = load_protobuf(schema, tuple((name, dep.value) for name, dep in deps))
    return TypedSchema(PROTOBUF, text, descriptor, refs, deps)


def _dependencies(refs: tuple[SchemaReference, ...], resolve: Resolver | None, kind: str
                  ) -> tuple[tuple[str, TypedSchema], ...]:
    out: dict[str, TypedSchema] = {}
    for ref in refs:
        if resolve is None:
            raise SchemaParseError("Invalid schema: schema references need the registry to resolve them")
        typed = resolve(ref)
        if typed.schema_type != kind:
            raise SchemaParseError(f"Invalid schema: reference {ref.name!r} ({ref.subject} version {ref.version}) "
                                   f"is a {typed.schema_type} schema, not {kind}")
        for name, dep in typed.dependencies:
            out.setdefault(name, dep)
        out.setdefault(ref.name, typed)
    return tuple(out.items())


def from_stored(data: bytes, resolve: Resolver | None = None) -> TypedSchema:
    """A stored schema (a ZooKeeper id node's bytes) back to its parsed form (``resolve``: its references)."""
    value = parse_canonical(data)
    if isinstance(value, dict) and set(value) in ({"schema", "schemaType"}, {"schema", "schemaType", "references"}):
        return parse_typed(value["schema"], value["schemaType"], parse_references(value.get("references")), resolve)
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
