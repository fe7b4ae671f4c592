"""Parsing a schema and its canonical form (the form stored in ZooKeeper and fingerprinted).

fastavro parses and validates (types, names, defaults); we then fully qualify names, drop the
`namespace` keys that full qualification makes redundant, collapse ``{"type": "string"}`` to
``"string"`` and sort keys. Two texts of the same schema therefore store the same bytes and get the
same id. Unlike Avro's "Parsing Canonical Form", defaults, docs, aliases and logical types are kept:
defaults decide compatibility, and docs are what people read in ``ferry schemas show``.
"""

from __future__ import annotations

import hashlib
import json

from fastavro.schema import parse_schema

from ferry.schemas.errors import SchemaParseError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
MAX_SCHEMA_BYTES = 512 * 1024  # a ZooKeeper znode holds at most ~1 MB

# A JSON value; an Avro schema is one: an object (record, enum, array, map, fixed, a logical type), a list
# (a union) or a type's name.
Json = dict[str, "Json"] | list["Json"] | str | int | float | bool | None
AvroSchema = Json


def load_schema(schema: str | bytes | dict | list, named_schemas: dict | None = None) -> AvroSchema:
    """Validate ``schema`` (JSON text or the decoded JSON) and return its canonical JSON value.

    ``named_schemas`` (fastavro's) holds the named types of the schema's references, which it may use by name."""
    if isinstance(schema, bytes):
        try:
            schema = schema.decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaParseError("schema is not UTF-8 text") from None
    if isinstance(schema, str):
        text = schema.strip()
        if text in PRIMITIVES:  # a bare primitive name is a schema, though not JSON
            schema = text
        else:
            try:
                schema = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SchemaParseError(f"schema is not valid JSON: {exc}") from None
    try:
        parsed = parse_schema(schema, named_schemas=named_schemas if named_schemas is not None else {},
                              _write_hint=False)
    except SchemaParseError:
        raise
    except Exception as exc:  # fastavro raises SchemaParseException, UnknownType (ValueError), TypeError...
        kind = type(exc).__name__
        detail = f"unknown type {str(exc)!r}" if kind == "UnknownType" else str(exc)
        raise SchemaParseError(f"not a valid Avro schema: {detail}") from None
    out = _normalise(parsed)
    _check_unique_fields(out)
    return out


def canonical_json(schema: AvroSchema) -> str:
    """The stored text of an already-canonical schema value."""
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise SchemaParseError(f"schema is {len(text.encode())} bytes; the limit is {MAX_SCHEMA_BYTES}")
    return text


def fingerprint(schema: AvroSchema) -> str:
    """SHA-256 (hex) of the canonical text: the key under which a schema's id is found."""
    return hashlib.sha256(canonical_json(schema).encode()).hexdigest()


def parse_canonical(text: str | bytes) -> AvroSchema:
    """A stored canonical text back to its JSON value."""
    return json.loads(text)


def _normalise(node: Json) -> Json:
    if isinstance(node, list):
        return [_normalise(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if not k.startswith("__fastavro")}
    if "name" in out and "." in str(out["name"]):
        out.pop("namespace", None)  # the full name carries it
    kind = out.get("type")
    if kind == "record" or kind == "error":
        out["fields"] = [
            {**{k: v for k, v in f.items()}, "type": _normalise(f["type"])} for f in out.get("fields", [])
        ]
    elif kind == "array":
        out["items"] = _normalise(out["items"])
    elif kind == "map":
        out["values"] = _normalise(out["values"])
    elif isinstance(kind, (dict, list)):
        out["type"] = _normalise(kind)
    if set(out) == {"type"} and (isinstance(out["type"], (list, dict)) or out["type"] in PRIMITIVES):
        return out["type"]
    return out


def _check_unique_fields(node: Json) -> None:
    if isinstance(node, list):
        for n in node:
            _check_unique_fields(n)
    elif isinstance(node, dict):
        if node.get("type") in ("record", "error"):
            seen: set[str] = set()
            for f in node.get("fields", []):
                if f["name"] in seen:
                    raise SchemaParseError(f"record {node.get('name')!r} has two fields named {f['name']!r}")
                seen.add(f["name"])
                _check_unique_fields(f["type"])
        for key in ("items", "values"):
            if key in node:
                _check_unique_fields(node[key])
        if isinstance(node.get("type"), (dict, list)):
            _check_unique_fields(node["type"])
