"""A writer schema compiled for the native columnar decoder, and its buffers turned into Arrow arrays.

``compile_schema`` flattens an Avro record schema into nodes (kind, argument, children) that
``ferry.loaders._avro_columns.AvroColumns`` walks for every body; ``arrays`` turns the buffers it filled
into one Arrow array per top-level field, typed as the warehouse column (the Spark type of
avro_columns.py converted by pyspark's ``to_arrow_schema``, so that the arrays are exactly what the table
holds). What the native walk cannot judge by itself is checked here on whole columns: UTF-8 of strings,
timestamps and dates Python's datetime can hold (fastavro would fail those records). Any doubt raises
``Doubt`` and the caller decodes that group the careful way, record by record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

KIND_NUMBERS = {"boolean": 1, "int": 2, "long": 3, "float": 4, "double": 5, "string": 6, "bytes": 7, "fixed": 8,
                "enum": 9, "record": 10, "array": 11, "map": 12, "nullable": 13, "uuid": 14}
_PRIMITIVE = {"boolean", "int", "long", "float", "double", "string", "bytes"}
# what Python's datetime holds (years 1-9999): fastavro turns these logical types into datetime/date
_MIN_MS, _MAX_MS = -62_135_596_800_000, 253_402_300_799_999
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896


class UnsupportedSchema(ValueError):
    """A schema the native decoder does not handle (decimal, ...): its records go the careful way."""


class Doubt(ValueError):
    """Decoded columns that fastavro might have judged differently: decode the group the careful way."""


@dataclass
class Node:
    kind: str
    arg: int = 0
    children: list[int] = field(default_factory=list)
    logical: str | None = None
    symbols: list[str] | None = None
    names: list[str] | None = None  # a record's field names, in order


@dataclass
class Program:
    nodes: list[Node]

    @property
    def fields(self) -> list[str]:
        return list(self.nodes[0].names or [])

    def native_args(self) -> tuple[list[int], list[int], list[list[int]]]:
        return ([KIND_NUMBERS[n.kind] for n in self.nodes], [n.arg for n in self.nodes],
                [list(n.children) for n in self.nodes])


def _full_name(schema: dict, namespace: str | None) -> str:
    name = schema["name"]
    ns = schema.get("namespace", namespace)
    return name if "." in name or not ns else f"{ns}.{name}"


def compile_schema(schema: dict) -> Program:
    """Nodes of a record schema, node 0 the record. Raises UnsupportedSchema."""
    nodes: list[Node] = []
    named: dict[str, dict] = {}

    def add(s, ns: str | None) -> int:
        if isinstance(s, str):
            if s in _PRIMITIVE:
                nodes.append(Node(s))
                return len(nodes) - 1
            for candidate in (s if "." in s or not ns else f"{ns}.{s}", s):
                if candidate in named:
                    target = named[candidate]
                    return add(target, _full_name(target, ns).rpartition(".")[0] or None)
            raise UnsupportedSchema(f"type {s!r}")
        if isinstance(s, list):
            branches = [b for b in s if b != "null"]
            if len(s) != 2 or len(branches) != 1:
                raise UnsupportedSchema(f"union {s!r}")
            at = len(nodes)
            nodes.append(Node("nullable", arg=s.index("null")))
            nodes[at].children = [add(branches[0], ns)]
            return at
        if not isinstance(s, dict):
            raise UnsupportedSchema(f"schema {s!r}")
        kind, logical = s.get("type"), s.get("logicalType")
        if kind in ("record", "error", "enum", "fixed"):
            full = _full_name(s, ns)
            named[full] = s
            ns = full.rpartition(".")[0] or None
        if logical == "decimal" and kind in ("bytes", "fixed"):
            raise UnsupportedSchema("decimal")
        at = len(nodes)
        if kind in ("record", "error"):
            nodes.append(Node("record", names=[f["name"] for f in s.get("fields", [])]))
            nodes[at].children = [add(f["type"], ns) for f in s.get("fields", [])]
        elif kind == "enum":
            nodes.append(Node("enum", arg=len(s["symbols"]), symbols=list(s["symbols"])))
        elif kind == "fixed":
            nodes.append(Node("fixed", arg=int(s["size"])))
        elif kind == "array":
            nodes.append(Node("array"))
            nodes[at].children = [add(s["items"], ns)]
        elif kind == "map":
            nodes.append(Node("map"))
            nodes[at].children = [add("string", ns), add(s["values"], ns)]
        elif kind == "string" and logical == "uuid":
            nodes.append(Node("uuid"))
        elif kind == "long" and logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                                            "local-timestamp-micros"):
            nodes.append(Node("long", logical=logical))
        elif kind == "int" and logical == "date":
            nodes.append(Node("int", logical=logical))
        elif kind == "int" and logical == "time-millis" or kind == "long" and logical == "time-micros":
            raise UnsupportedSchema(logical)
        elif isinstance(kind, (str, list, dict)):
            return add(kind, ns)
        else:
            raise UnsupportedSchema(f"schema {s!r}")
        return at

    if not isinstance(schema, dict) or schema.get("type") not in ("record", "error"):
        raise UnsupportedSchema("not a record schema")
    add(schema, None)
    return Program(nodes)


def _bitmap(valid: bytes | None, n: int) -> tuple[pa.Buffer | None, int]:
    if valid is None:
        return None, 0
    flags = np.frombuffer(valid, np.uint8, n)
    nulls = n - int(np.count_nonzero(flags))
    return (pa.py_buffer(np.packbits(flags, bitorder="little")), nulls) if nulls else (None, 0)


def arrays(program: Program, taken: list[tuple], types: list[pa.DataType]) -> list[pa.Array]:
    """The top-level fields' arrays from ``AvroColumns.take()``, as ``types`` (one per field)."""
    root = program.nodes[0]
    return [_build(program, taken, i, t, None) for i, t in zip(root.children, types, strict=True)]


def _build(program: Program, taken: list[tuple], i: int, kind: pa.DataType, valid: bytes | None) -> pa.Array:
    node = program.nodes[i]
    n, vals, data, own_valid = taken[i]
    if node.kind == "nullable":
        return _build(program, taken, node.children[0], kind, own_valid)
    bitmap, nulls = _bitmap(valid, n)
    k = node.kind
    if k in ("string", "bytes", "uuid"):
        out = pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(vals), pa.py_buffer(data)], nulls)
        if k == "string":
            try:
                out.validate(full=True)
            except pa.ArrowInvalid as e:
                raise Doubt(f"string column: {e}") from None
        return out
    if k == "long" and node.logical:
        values = np.frombuffer(vals, np.int64, n)
        millis = node.logical.endswith("millis")
        ms = values if millis else values // 1000
        check = ms if valid is None else ms[np.frombuffer(valid, np.uint8, n).astype(bool)]
        if check.size and (check.min() < _MIN_MS or check.max() > _MAX_MS):
            raise Doubt("timestamp out of datetime's range")
        return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(values * 1000 if millis else values)], nulls)
    if k == "int" and node.logical == "date":
        values = np.frombuffer(vals, np.int32, n)
        check = values if valid is None else values[np.frombuffer(valid, np.uint8, n).astype(bool)]
        if check.size and (check.min() < _MIN_DAY or check.max() > _MAX_DAY):
            raise Doubt("date out of datetime's range")
        return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(vals)], nulls)
    if k in ("int", "long", "float", "double"):
        return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(vals)], nulls)
    if k == "boolean":
        bits = pa.py_buffer(np.packbits(np.frombuffer(vals, np.uint8, n), bitorder="little"))
        return pa.Array.from_buffers(kind, n, [bitmap, bits], nulls)
    if k == "fixed":
        offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32) * np.int32(node.arg))
        return pa.Array.from_buffers(kind, n, [bitmap, offsets, pa.py_buffer(data)], nulls)
    if k == "enum":
        indices = pa.Array.from_buffers(pa.int32(), n, [bitmap, pa.py_buffer(vals)], nulls)
        return pa.array(node.symbols, kind).take(indices)
    if k == "record":
        children = [_build(program, taken, c, f.type, None)
                    for c, f in zip(node.children, kind, strict=True)]
        return pa.Array.from_buffers(kind, n, [bitmap], nulls, children=children)
    if k == "array":
        child = _build(program, taken, node.children[0], kind.value_type, None)
        return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(vals)], nulls, children=[child])
    if k == "map":
        keys = _build(program, taken, node.children[0], kind.key_type, None)
        items = _build(program, taken, node.children[1], kind.item_type, None)
        entries = pa.StructArray.from_arrays([keys, items], fields=[kind.key_field, kind.item_field])
        return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(vals)], nulls, children=[entries])
    raise UnsupportedSchema(f"node kind {k}")
