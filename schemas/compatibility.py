"""Schema compatibility: can a reader schema read data written with a writer schema?

This walks both schemas by the Avro specification's "Schema Resolution" rules (fastavro applies
them when decoding but has no checker):

* a writer union: every branch must be readable (any of them may have been written);
* a reader union: some branch must read the writer's type;
* primitives match, or promote: int → long/float/double, long → float/double, float → double,
  string ↔ bytes;
* records: same unqualified name (or a reader alias); each reader field either exists in the writer
  (by name or alias) with a readable type, or has a default; writer-only fields are skipped;
* enums: same name; every writer symbol is a reader symbol, unless the reader has a default symbol;
* arrays/maps: items/values readable; fixed: same name and size.

Compatibility levels (as in Confluent's registry): BACKWARD — the new schema reads data written
with the previous one (consumers upgrade first); FORWARD — the previous schema reads data written
with the new one; FULL — both; *_TRANSITIVE — against every earlier version, not just the latest;
NONE — no check.
"""

from __future__ import annotations

from ferry.schemas.canonical import PRIMITIVES, AvroSchema

LEVELS = ("NONE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"

# writer type -> reader types that can read it
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


def normalise_level(level: str) -> str:
    value = str(level).strip().upper()
    if value not in LEVELS:
        raise ValueError(f"unknown compatibility level {level!r} (choose from {', '.join(LEVELS)})")
    return value


def reader_problems(
    reader: AvroSchema, writer: AvroSchema, reader_label: str = "the reader", writer_label: str = "the writer"
) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty list: it can)."""
    return _Checker(reader, writer, reader_label, writer_label).check(reader, writer, _root_path(reader))


def compatibility_problems(
    level: str, new: AvroSchema, previous: list[tuple[str, AvroSchema]]
) -> list[str]:
    """Problems of registering ``new`` after ``previous`` ([(label, schema)], oldest first) at ``level``."""
    level = normalise_level(level)
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    problems: list[str] = []
    for label, old in reversed(against):
        if level.startswith(("BACKWARD", "FULL")):
            problems += reader_problems(new, old, "the new schema", label)
        if level.startswith(("FORWARD", "FULL")):
            problems += reader_problems(old, new, label, "the new schema")
    return problems


def _root_path(schema: AvroSchema) -> str:
    if isinstance(schema, dict) and "name" in schema:
        return _short(schema["name"])
    return "<root>"


def _where(path: str) -> str:
    return f"field {path!r}" if any(c in path for c in ".[{") else f"{path!r}"


def _short(name: str) -> str:
    return str(name).rsplit(".", 1)[-1]


def named_types(schema: AvroSchema, out: dict[str, AvroSchema] | None = None) -> dict[str, AvroSchema]:
    """Every named type defined in ``schema`` (canonical: names are fully qualified)."""
    out = {} if out is None else out
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            out.setdefault(schema["name"], schema)
        if kind in ("record", "error"):
            for f in schema.get("fields", []):
                named_types(f["type"], out)
        elif kind == "array":
            named_types(schema["items"], out)
        elif kind == "map":
            named_types(schema["values"], out)
        elif isinstance(kind, (dict, list)):
            named_types(kind, out)
    return out


def _kind(schema: AvroSchema) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        kind = schema.get("type")
        return _kind(kind) if isinstance(kind, (dict, list)) else str(kind)
    return str(schema)


def _describe(schema: AvroSchema) -> str:
    if isinstance(schema, list):
        return "union [" + ", ".join(_describe(b) for b in schema) + "]"
    if isinstance(schema, dict):
        kind = _kind(schema)
        if "name" in schema:
            return f"{kind} {_short(schema['name'])}"
        if kind == "array":
            return f"array<{_describe(schema['items'])}>"
        if kind == "map":
            return f"map<{_describe(schema['values'])}>"
        if "logicalType" in schema:
            return f"{kind} ({schema['logicalType']})"
        return kind
    return str(schema) if schema in PRIMITIVES else _short(str(schema))


class _Checker:
    def __init__(self, reader: AvroSchema, writer: AvroSchema, reader_label: str, writer_label: str) -> None:
        self.reader_names = named_types(reader)
        self.writer_names = named_types(writer)
        self.r_label = reader_label
        self.w_label = writer_label
        self.in_progress: set[tuple[str, str]] = set()  # recursive records: assume fine while checking

    def _resolve(self, schema: AvroSchema, names: dict[str, AvroSchema]) -> AvroSchema:
        while isinstance(schema, str) and schema not in PRIMITIVES:
            if schema not in names:
                return schema
            schema = names[schema]
        if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)) and "name" not in schema:
            return self._resolve(schema["type"], names)
        return schema

    def check(self, reader: AvroSchema, writer: AvroSchema, path: str) -> list[str]:
        reader = self._resolve(reader, self.reader_names)
        writer = self._resolve(writer, self.writer_names)
        r_kind, w_kind = _kind(reader), _kind(writer)

        if w_kind == "union":
            problems: list[str] = []
            for branch in writer:
                problems += self.check(reader, branch, path)
            return problems
        if r_kind == "union":
            for branch in reader:
                if not self.check(branch, writer, path):
                    return []
            return [
                f"{_where(path)}: {self.w_label} writes {_describe(writer)}, and no branch of "
                f"{self.r_label}'s {_describe(reader)} can read it"
            ]
        if r_kind != w_kind:
            if r_kind in _PROMOTIONS.get(w_kind, ()):
                return []
            return [
                f"{_where(path)}: type changed from {_describe(writer)} ({self.w_label}) to "
                f"{_describe(reader)} ({self.r_label}); Avro can only promote int to long/float/double, "
                "long to float/double, float to double, and string to/from bytes"
            ]
        if r_kind in PRIMITIVES:
            return self._check_logical(reader, writer, path)
        if r_kind in ("record", "error"):
            return self._check_record(reader, writer, path)
        if r_kind == "enum":
            return self._check_enum(reader, writer, path)
        if r_kind == "array":
            return self.check(reader["items"], writer["items"], path + "[]")
        if r_kind == "map":
            return self.check(reader["values"], writer["values"], path + "{}")
        if r_kind == "fixed":
            problems = self._check_name(reader, writer, path)
            if reader.get("size") != writer.get("size"):
                problems.append(
                    f"{_where(path)}: fixed size changed from {writer.get('size')} ({self.w_label}) "
                    f"to {reader.get('size')} ({self.r_label})"
                )
            return problems
        return [f"{_where(path)}: unsupported schema type {r_kind!r}"]

    def _check_logical(self, reader: AvroSchema, writer: AvroSchema, path: str) -> list[str]:
        # Logical types resolve on their underlying type, except that a decimal's scale gives the bytes meaning.
        r_dec = isinstance(reader, dict) and reader.get("logicalType") == "decimal"
        w_dec = isinstance(writer, dict) and writer.get("logicalType") == "decimal"
        if r_dec and w_dec and reader.get("scale", 0) != writer.get("scale", 0):
            return [
                f"{_where(path)}: decimal scale changed from {writer.get('scale', 0)} to {reader.get('scale', 0)}"
            ]
        return []

    def _check_name(self, reader: dict, writer: dict, path: str) -> list[str]:
        w_name = _short(writer["name"])
        accepted = {_short(reader["name"])} | {_short(a) for a in reader.get("aliases", [])}
        if w_name in accepted:
            return []
        return [
            f"{_where(path)}: {_kind(reader)} name changed from {w_name!r} ({self.w_label}) to "
            f"{_short(reader['name'])!r} ({self.r_label}) without an alias for the old name"
        ]

    def _check_record(self, reader: dict, writer: dict, path: str) -> list[str]:
        problems = self._check_name(reader, writer, path)
        if problems:
            return problems
        key = (reader["name"], writer["name"])
        if key in self.in_progress:
            return []
        self.in_progress.add(key)
        try:
            w_fields = {f["name"]: f for f in writer.get("fields", [])}
            for r_field in reader.get("fields", []):
                name = r_field["name"]
                field_path = f"{path}.{name}"
                w_field = w_fields.get(name)
                if w_field is None:
                    for alias in r_field.get("aliases", []):
                        if alias in w_fields:
                            w_field = w_fields[alias]
                            break
                if w_field is None:
                    if "default" not in r_field:
                        problems.append(
                            f"field {field_path!r} ({_describe(self._resolve(r_field['type'], self.reader_names))}) "
                            f"is in {self.r_label} but not in {self.w_label} and has no default, so "
                            f"{self.r_label} cannot read data written with {self.w_label}"
                        )
                    continue
                problems += self.check(r_field["type"], w_field["type"], field_path)
        finally:
            self.in_progress.discard(key)
        return problems

    def _check_enum(self, reader: dict, writer: dict, path: str) -> list[str]:
        problems = self._check_name(reader, writer, path)
        if problems:
            return problems
        missing = [s for s in writer.get("symbols", []) if s not in set(reader.get("symbols", []))]
        if missing and "default" not in reader:
            return [
                f"{_where(path)}: enum {_short(reader['name'])} in {self.r_label} lacks symbol(s) "
                f"{', '.join(missing)} that {self.w_label} may write, and has no default symbol"
            ]
        return []
