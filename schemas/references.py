"""Schema references (Confluent's ``references: [{name, subject, version}]``): a schema naming types that
another subject's version defines.

``name`` is how the referencing schema refers to it: an Avro named type's full name, a JSON Schema ``$ref``
target, a Protobuf import's file name. A reference pins one version (``-1``, "latest", is pinned to the
latest version when the schema is registered), so the meaning of an id never changes; the registry refuses
to delete a version that a registered schema references (ReferenceExistsError, 42206).

Resolution is the registry's (registry.py); this module holds the reference itself and the per-type
inlining that makes a referencing schema self-contained for the compatibility rules and for readers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ferry.schemas.errors import SchemaParseError

LATEST = -1
_MAX_DEPTH = 64  # $ref chains through referenced JSON schemas


@dataclass(frozen=True)
class SchemaReference:
    """One ``{name, subject, version}`` entry of a schema's references."""

    name: str
    subject: str
    version: int

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


def parse_references(raw: object) -> tuple[SchemaReference, ...]:
    """A request's ``references`` (a list of objects, or None) as SchemaReferences; SchemaParseError if malformed."""
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)):
        raise SchemaParseError("Invalid schema: references must be a list of {name, subject, version}")
    out: list[SchemaReference] = []
    for item in raw:
        if isinstance(item, SchemaReference):
            out.append(item)
            continue
        if not isinstance(item, dict):
            raise SchemaParseError(f"Invalid schema: reference {item!r} is not an object")
        name, subject, version = item.get("name"), item.get("subject"), item.get("version", LATEST)
        if not isinstance(name, str) or not name or not isinstance(subject, str) or not subject:
            raise SchemaParseError(f"Invalid schema: reference {json.dumps(item)} needs a name and a subject")
        if isinstance(version, bool) or not isinstance(version, int) or (version < 1 and version != LATEST):
            raise SchemaParseError(f"Invalid schema: reference {name!r} has version {version!r} "
                                   "(a version number, or -1 for the latest)")
        out.append(SchemaReference(name, subject, version))
    names = [r.name for r in out]
    if len(set(names)) != len(names):
        raise SchemaParseError("Invalid schema: two references share a name")
    return tuple(out)


def stored_references(references: tuple[SchemaReference, ...]) -> list[dict[str, object]]:
    return [r.as_dict() for r in references]


def inline_avro(schema: object, definitions: dict[str, object]) -> object:
    """``schema`` with the first use of each referenced named type replaced by its definition, so that the
    schema parses and resolves on its own (later uses stay names, as Avro requires)."""
    defined: set[str] = set()
    return _Inliner(definitions, defined).walk(schema)


class _Inliner:
    def __init__(self, definitions: dict[str, object], defined: set[str]) -> None:
        self._definitions, self._defined = definitions, defined

    def walk(self, node: object) -> object:
        if isinstance(node, str):
            if node in self._definitions and node not in self._defined:
                return self.walk(self._definitions[node])  # the definition's walk marks it defined
            return node
        if isinstance(node, list):
            return [self.walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = dict(node)
        if isinstance(out.get("name"), str) and out.get("type") in ("record", "error", "enum", "fixed"):
            if out["name"] in self._defined:
                return out["name"]  # defined earlier (e.g. a nested type of a reference used on its own first)
            self._defined.add(out["name"])
        if out.get("type") in ("record", "error"):
            out["fields"] = [{**f, "type": self.walk(f["type"])} for f in out.get("fields", [])]
        elif out.get("type") == "array":
            out["items"] = self.walk(out["items"])
        elif out.get("type") == "map":
            out["values"] = self.walk(out["values"])
        elif isinstance(out.get("type"), (dict, list)) or out.get("type") in self._definitions:
            out["type"] = self.walk(out["type"])
        return out


def inline_json(schema: object, documents: dict[str, object], depth: int = 0) -> object:
    """``schema`` with each ``$ref`` to a referenced document (``name`` or ``name#/json/pointer``) replaced by
    that document (its other keywords kept beside it), so the compatibility rules compare what is meant."""
    if depth > _MAX_DEPTH:
        raise SchemaParseError("Invalid JSON Schema: $ref chain through references too deep")
    if isinstance(schema, list):
        return [inline_json(s, documents, depth) for s in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.split("#", 1)[0] in documents:
        name, _, pointer = ref.partition("#")
        target = _pointer(documents[name], pointer, ref)
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        resolved = inline_json(target, documents, depth + 1)
        if not rest:
            return resolved
        return {**(resolved if isinstance(resolved, dict) else {}), **inline_json(rest, documents, depth)}
    return {k: inline_json(v, documents, depth) for k, v in schema.items()}


def _pointer(document: object, pointer: str, ref: str) -> object:
    node = document
    for part in [p for p in pointer.lstrip("/").split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise SchemaParseError(f"Invalid JSON Schema: $ref {ref!r} points at nothing in the referenced schema")
    return node
