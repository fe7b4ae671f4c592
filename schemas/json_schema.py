"""JSON Schema subjects: parsing (jsonschema's own meta-schema check) and compatibility.

Compatibility asks whether every document valid under the writer schema is valid under the reader
schema, keyword by keyword (a subset of Confluent's JSON Schema rules, documented in docs/schemas.md):

* ``type``: the writer's types must all be accepted by the reader (``integer`` is a ``number``);
  widening is fine for a reader, narrowing is not;
* ``properties`` with ``additionalProperties``: a property only the reader declares is fine when the
  writer's content model is closed (``additionalProperties: false``) and refused when open (the
  writer's documents may carry anything under that name); a property only the writer declares is
  fine when the reader is open and refused when the reader is closed;
* ``required``: the reader may not require a property the writer does not require;
* ``enum``: the writer's values must be among the reader's; ``const`` must stay equal;
* ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``/``minLength``/``maxLength``/
  ``minItems``/``maxItems``: the reader's bound may only be looser;
* ``items`` (one schema) is compared recursively; any other keyword that differs (``oneOf``, ``$ref``,
  ``pattern``...) is reported as a change the checker cannot prove safe.
"""

from __future__ import annotations

import json

from ferry.schemas.errors import SchemaParseError

_CHECKED = {"type", "properties", "additionalProperties", "required", "enum", "const", "items", "minimum",
            "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
            "title", "description", "$schema", "$id", "$comment", "default", "examples"}
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems")
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems")
_ALL_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})


def load_json_schema(text: str) -> tuple[str, object]:
    """The canonical text (sorted keys, no spaces) and value of a JSON Schema document."""
    # jsonschema loads only when a JSON subject is met: the mirror and loaders (Avro) import ferry.schemas without it
    from jsonschema.exceptions import SchemaError as MetaSchemaError
    from jsonschema.validators import validator_for

    try:
        value = json.loads(text)
    except (ValueError, TypeError) as e:
        raise SchemaParseError(f"Invalid JSON Schema: not JSON: {e}") from None
    if not isinstance(value, (dict, bool)):
        raise SchemaParseError("Invalid JSON Schema: a schema is a JSON object or a boolean")
    try:
        validator_for(value).check_schema(value)
    except MetaSchemaError as e:
        raise SchemaParseError(f"Invalid JSON Schema: {e.message}") from None
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False), value


def json_reader_problems(reader: object, writer: object, reader_label: str, writer_label: str) -> list[str]:
    """Why documents valid under ``writer`` may be invalid under ``reader`` (empty: none)."""
    return _Comparison(reader_label, writer_label).check(reader, writer, "#")


def _types(schema: dict) -> frozenset[str]:
    kind = schema.get("type")
    if kind is None:
        return _ALL_TYPES
    return frozenset([kind] if isinstance(kind, str) else kind)


def _open(schema: dict) -> bool:
    return schema.get("additionalProperties", True) is not False


class _Comparison:
    def __init__(self, reader_label: str, writer_label: str) -> None:
        self.r, self.w = reader_label, writer_label

    def check(self, reader: object, writer: object, path: str) -> list[str]:
        if reader is True or reader == {}:
            return []
        if writer is False:
            return []
        if not isinstance(reader, dict) or not isinstance(writer, dict):
            return [] if reader == writer else [f"{path}: schema changed from {writer} to {reader}"]
        problems = self._types(reader, writer, path)
        problems += self._object(reader, writer, path)
        problems += self._bounds(reader, writer, path)
        if "enum" in reader:
            missing = [v for v in writer.get("enum", [None]) if v not in reader["enum"]] if "enum" in writer \
                else ["(any value)"]
            if missing:
                problems.append(f"{path}: enum of {self.r} lacks {missing} that {self.w} allows")
        if "const" in reader and reader.get("const") != writer.get("const", object()):
            problems.append(f"{path}: const changed to {reader['const']!r} ({self.r})")
        if isinstance(reader.get("items"), dict):
            problems += self.check(reader["items"], writer.get("items", True), path + "/items")
        for key in sorted((set(reader) | set(writer)) - _CHECKED):
            if reader.get(key) != writer.get(key):
                problems.append(f"{path}: keyword {key!r} changed between {self.w} and {self.r} "
                                "(not provably compatible)")
        return problems

    def _types(self, reader: dict, writer: dict, path: str) -> list[str]:
        accepted = set(_types(reader))
        if "number" in accepted:
            accepted.add("integer")
        narrowed = sorted(_types(writer) - accepted)
        if narrowed:
            return [f"{path}: type narrowed: {self.w} allows {narrowed} which {self.r} "
                    f"(type {sorted(_types(reader))}) refuses"]
        return []

    def _object(self, reader: dict, writer: dict, path: str) -> list[str]:
        problems = []
        r_props, w_props = reader.get("properties", {}), writer.get("properties", {})
        for name in sorted(set(r_props) | set(w_props)):
            where = f"{path}/properties/{name}"
            if name in r_props and name in w_props:
                problems += self.check(r_props[name], w_props[name], where)
            elif name in r_props and _open(writer):
                writer_extra = writer.get("additionalProperties", True)
                if self.check(r_props[name], writer_extra, where):
                    problems.append(f"{where}: property added to {self.r} while {self.w}'s content model is "
                                    "open (its documents may hold anything under that name)")
            elif name in w_props and not _open(reader):
                problems.append(f"{where}: property removed from {self.r}, whose content model is closed "
                                f"(additionalProperties false), while {self.w}'s documents carry it")
        if not _open(reader) and _open(writer) and not problems and _types(writer) & {"object"}:
            problems.append(f"{path}: {self.r} closes the content model (additionalProperties false) that "
                            f"{self.w} leaves open")
        new_required = sorted(set(reader.get("required", [])) - set(writer.get("required", [])))
        if new_required:
            problems.append(f"{path}: {self.r} requires {new_required}, which {self.w} does not require")
        return problems

    def _bounds(self, reader: dict, writer: dict, path: str) -> list[str]:
        problems = []
        for key in _LOWER + _UPPER:
            if key not in reader:
                continue
            mine, theirs = reader[key], writer.get(key)
            tighter = theirs is None or (mine > theirs if key in _LOWER else mine < theirs)
            if tighter:
                problems.append(f"{path}: {key} narrowed to {mine} in {self.r} (was {theirs} in {self.w})")
        return problems
