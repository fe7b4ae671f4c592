"""Avro schemas as warehouse columns: Avro type -> Spark type, and the table's schema evolution rule.

A topic's table has one column per top-level field of any schema version seen so far (the union, in the
order fields first appeared) plus ``_topic, _partition, _offset, _event_time`` and the partition columns
``dt, hr``. Compatible evolution = new columns (nullable: rows written before read null); a field that
disappears stays a column (null in new rows). Anything that would change an existing column's type is
incompatible and stops the load with an error naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import types as T

META_COLUMNS = (("_topic", T.StringType()), ("_partition", T.IntegerType()), ("_offset", T.LongType()),
                ("_event_time", T.TimestampType()))
PARTITION_COLUMNS = ("dt", "hr")
RESERVED = {name for name, _ in META_COLUMNS} | set(PARTITION_COLUMNS)

_PRIMITIVES: dict[str, T.DataType] = {
    "boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(), "float": T.FloatType(),
    "double": T.DoubleType(), "bytes": T.BinaryType(), "string": T.StringType(),
}


class SchemaMappingError(ValueError):
    """An Avro schema that has no warehouse column mapping, or an incompatible change."""


@dataclass(frozen=True)
class Column:
    name: str
    dtype: T.DataType


def _name_of(schema: dict, namespace: str | None) -> str:
    name = schema["name"]
    ns = schema.get("namespace", namespace)
    return name if "." in name or not ns else f"{ns}.{name}"


class _Mapper:
    def __init__(self) -> None:
        self.named: dict[str, object] = {}
        self.in_progress: set[str] = set()

    def spark_type(self, schema, namespace: str | None, where: str) -> tuple[T.DataType, bool]:
        """(type, nullable) of an Avro schema."""
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema], False
            if schema == "null":
                raise SchemaMappingError(f"{where}: a field of type null has no column type")
            full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            for candidate in (full, schema):
                if candidate in self.in_progress:
                    raise SchemaMappingError(f"{where}: recursive type {candidate} cannot be a column")
                if candidate in self.named:
                    return self.spark_type(self.named[candidate], namespace, where)
            raise SchemaMappingError(f"{where}: unknown Avro type {schema!r}")
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null"]
            if len(branches) != 1:
                raise SchemaMappingError(f"{where}: union {schema!r} is not supported (only [null, X])")
            dtype, _ = self.spark_type(branches[0], namespace, where)
            return dtype, True
        if not isinstance(schema, dict):
            raise SchemaMappingError(f"{where}: unreadable Avro schema {schema!r}")
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if kind in ("record", "error"):
            full = _name_of(schema, namespace)
            self.named[full] = schema
            self.in_progress.add(full)
            ns = full.rpartition(".")[0] or None
            fields = []
            for f in schema.get("fields", []):
                dtype, nullable = self.spark_type(f["type"], ns, f"{where}.{f['name']}")
                fields.append(T.StructField(f["name"], dtype, True))
            self.in_progress.discard(full)
            return T.StructType(fields), False
        if kind == "enum":
            self.named[_name_of(schema, namespace)] = schema
            return T.StringType(), False
        if kind == "fixed":
            self.named[_name_of(schema, namespace)] = schema
            if logical == "decimal":
                return T.DecimalType(int(schema["precision"]), int(schema.get("scale", 0))), False
            return T.BinaryType(), False
        if kind == "array":
            dtype, _ = self.spark_type(schema["items"], namespace, f"{where}[]")
            return T.ArrayType(dtype, True), False
        if kind == "map":
            dtype, _ = self.spark_type(schema["values"], namespace, f"{where}{{}}")
            return T.MapType(T.StringType(), dtype, True), False
        if kind == "bytes" and logical == "decimal":
            return T.DecimalType(int(schema["precision"]), int(schema.get("scale", 0))), False
        if kind == "int" and logical == "date":
            return T.DateType(), False
        if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
            return T.TimestampType(), False
        if kind == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
            return T.TimestampNTZType(), False
        if kind == "int" and logical == "time-millis":
            raise SchemaMappingError(f"{where}: time-millis is not supported as a column (use int)")
        if kind == "long" and logical == "time-micros":
            raise SchemaMappingError(f"{where}: time-micros is not supported as a column (use long)")
        if isinstance(kind, (str, list, dict)) and kind not in ("record", "error", "enum", "fixed", "array", "map"):
            return self.spark_type(kind, namespace, where)
        raise SchemaMappingError(f"{where}: unsupported Avro schema {schema!r}")


def uuid_fields(schema: dict) -> set[str]:
    """Top-level fields with logicalType uuid (fastavro decodes them to uuid.UUID; columns hold text)."""
    out = set()
    for f in schema.get("fields", []) if isinstance(schema, dict) else []:
        branches = f["type"] if isinstance(f["type"], list) else [f["type"]]
        if any(isinstance(b, dict) and b.get("logicalType") == "uuid" for b in branches):
            out.add(f["name"])
    return out


def avro_columns(schema: dict, what: str = "schema") -> list[Column]:
    """Top-level columns of a record schema (every column nullable: old rows, removed fields)."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise SchemaMappingError(f"{what}: a topic's value schema must be an Avro record")
    mapper = _Mapper()
    struct, _ = mapper.spark_type(schema, None, schema.get("name", "record"))
    cols = []
    for f in struct.fields:
        if f.name in RESERVED or f.name.lower() in RESERVED:
            raise SchemaMappingError(f"{what}: field {f.name!r} collides with a column ferry adds "
                                     f"({', '.join(sorted(RESERVED))})")
        cols.append(Column(f.name, f.dataType))
    return cols


def merge_columns(existing: list[tuple[str, T.DataType]], new: list[Column], what: str) -> list[tuple[str, T.DataType]]:
    """The table's data columns after seeing ``new``: existing ones kept, new names appended.

    Raises SchemaMappingError when a name exists with another type (an incompatible change).
    """
    out = list(existing)
    index = {name.lower(): (name, dtype) for name, dtype in existing}
    for col in new:
        have = index.get(col.name.lower())
        if have is None:
            out.append((col.name, col.dtype))
            index[col.name.lower()] = (col.name, col.dtype)
        elif not _same_type(have[1], col.dtype):
            raise SchemaMappingError(
                f"{what}: incompatible schema change for column {have[0]!r}: table has "
                f"{have[1].simpleString()}, the schema says {col.dtype.simpleString()} "
                "(only new fields are a compatible change; use a new field name)")
    return out


def _same_type(a: T.DataType, b: T.DataType) -> bool:
    # Nullability inside nested types is not part of compatibility (every column is nullable).
    return a.simpleString() == b.simpleString()


def table_struct(data_columns: list[tuple[str, T.DataType]], with_meta: bool = True) -> T.StructType:
    """Full table schema: data columns, ferry's metadata columns, then dt and hr."""
    fields = [T.StructField(n, t, True) for n, t in data_columns]
    if with_meta:
        fields += [T.StructField(n, t, True) for n, t in META_COLUMNS]
    fields += [T.StructField(p, T.StringType(), True) for p in PARTITION_COLUMNS]
    return T.StructType(fields)
