"""The compatibility checker, cross-checked against fastavro's own schema resolution."""

from __future__ import annotations

import io
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import parse_schema

from ferry.schemas.canonical import load_schema
from ferry.schemas.compatibility import compatibility_problems, normalise_level, reader_problems


def rec(*fields: dict, name: str = "PageView") -> dict:
    return {"type": "record", "name": name, "namespace": "ferry.events", "fields": list(fields)}


def f(name: str, type_: Any, **extra: Any) -> dict:
    return {"name": name, "type": type_, **extra}


BASE = rec(f("event_time", "long"), f("member_id", "int"), f("page", "string"))
BASE_DATUM = {"event_time": 1, "member_id": 7, "page": "/feed"}


def problems(reader: Any, writer: Any) -> list[str]:
    return reader_problems(load_schema(reader), load_schema(writer))


def decodes(reader: Any, writer: Any, datum: Any) -> Any:
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(load_schema(writer)), datum)
    buf.seek(0)
    return schemaless_reader(buf, parse_schema(load_schema(writer)), parse_schema(load_schema(reader)))


# (reader, writer, datum written with writer): the checker must say compatible and fastavro must decode it
COMPATIBLE = [
    (rec(*BASE["fields"], f("referrer", ["null", "string"], default=None)), BASE, BASE_DATUM),  # added w/ default
    (rec(f("event_time", "long"), f("page", "string")), BASE, BASE_DATUM),  # removed field
    (rec(f("event_time", "long"), f("member_id", "long"), f("page", "string")), BASE, BASE_DATUM),  # int->long
    (rec(f("event_time", "double"), f("member_id", "float"), f("page", "bytes")), BASE, BASE_DATUM),
    (rec(f("event_time", "long"), f("member_id", ["null", "int"]), f("page", "string")), BASE, BASE_DATUM),
    (rec(f("x", ["null", "long", "string"])), rec(f("x", ["null", "int"])), {"x": 3}),  # union widened + promoted
    (rec(f("e", {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]})),
     rec(f("e", {"type": "enum", "name": "E", "symbols": ["A", "B"]})), {"e": "B"}),
    (rec(f("e", {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"})),
     rec(f("e", {"type": "enum", "name": "E", "symbols": ["A", "B"]})), {"e": "B"}),  # enum default
    (rec(f("xs", {"type": "array", "items": "long"})), rec(f("xs", {"type": "array", "items": "int"})), {"xs": [1]}),
    (rec(f("m", {"type": "map", "values": "double"})), rec(f("m", {"type": "map", "values": "float"})), {"m": {}}),
    (rec(f("new_name", "int", aliases=["old"])), rec(f("old", "int")), {"old": 5}),  # field alias
    (rec(f("a", "int"), name="Renamed") | {"aliases": ["ferry.events.PageView"]}, rec(f("a", "int")), {"a": 1}),
    (rec(f("inner", rec(f("a", "int"), f("b", "string", default="x"), name="Inner"))),
     rec(f("inner", rec(f("a", "int"), name="Inner"))), {"inner": {"a": 1}}),
    (rec(f("next", ["null", "Node"], default=None), f("v", "long"), name="Node"),
     rec(f("next", ["null", "Node"], default=None), f("v", "int"), name="Node"),
     {"next": {"next": None, "v": 2}, "v": 1}),  # recursive
    ("string", "bytes", b"abc"),
]

# (reader, writer, fragment of the expected problem)
INCOMPATIBLE = [
    (rec(*BASE["fields"], f("referrer", "string")), BASE, "'PageView.referrer'"),
    (rec(f("event_time", "int"), f("member_id", "int"), f("page", "string")), BASE, "'PageView.event_time'"),
    (rec(f("event_time", "long"), f("member_id", "string"), f("page", "string")), BASE, "type changed from int"),
    (rec(f("x", ["null", "int"])), rec(f("x", ["null", "long"])), "no branch"),
    (rec(f("x", "int")), rec(f("x", ["null", "int"])), "'PageView.x'"),
    (rec(f("e", {"type": "enum", "name": "E", "symbols": ["A"]})),
     rec(f("e", {"type": "enum", "name": "E", "symbols": ["A", "B"]})), "lacks symbol(s) B"),
    (rec(f("a", "int"), name="Other"), rec(f("a", "int")), "name changed"),
    (rec(f("h", {"type": "fixed", "name": "H", "size": 8})), rec(f("h", {"type": "fixed", "name": "H", "size": 16})),
     "fixed size"),
    (rec(f("xs", {"type": "array", "items": "int"})), rec(f("xs", {"type": "array", "items": "long"})),
     "'PageView.xs[]'"),
    (rec(f("inner", rec(f("a", "int"), f("b", "string"), name="Inner"))),
     rec(f("inner", rec(f("a", "int"), name="Inner"))), "'PageView.inner.b'"),
]


@pytest.mark.parametrize(("reader", "writer", "datum"), COMPATIBLE)
def test_compatible_pairs_decode(reader: Any, writer: Any, datum: Any) -> None:
    assert problems(reader, writer) == []
    decodes(reader, writer, datum)  # fastavro agrees


@pytest.mark.parametrize(("reader", "writer", "fragment"), INCOMPATIBLE)
def test_incompatible_pairs(reader: Any, writer: Any, fragment: str) -> None:
    found = problems(reader, writer)
    assert found, "expected a problem"
    assert any(fragment in p for p in found), found


def test_fastavro_fails_where_checker_refuses() -> None:
    # the oracle the other way: the refused "added field without default" really cannot be read
    reader = rec(*BASE["fields"], f("referrer", "string"))
    with pytest.raises(Exception):  # noqa: B017 - fastavro's SchemaResolutionError
        decodes(reader, BASE, BASE_DATUM)


def test_levels() -> None:
    v1 = load_schema(BASE)
    added_no_default = load_schema(rec(*BASE["fields"], f("referrer", "string")))
    removed = load_schema(rec(f("event_time", "long"), f("page", "string")))
    prev = [("version 1", v1)]
    assert compatibility_problems("BACKWARD", added_no_default, prev)
    assert compatibility_problems("FORWARD", added_no_default, prev) == []  # old readers ignore the new field
    assert compatibility_problems("BACKWARD", removed, prev) == []
    assert any("'PageView.member_id'" in p for p in compatibility_problems("FORWARD", removed, prev))
    assert compatibility_problems("FULL", removed, prev)
    assert compatibility_problems("NONE", added_no_default, prev) == []
    # transitive: v3 only compatible with v2, not with v1
    v2 = load_schema(rec(f("event_time", "long"), f("member_id", "int"), f("page", "string"),
                         f("ref", "string", default="")))
    v3 = load_schema(rec(f("event_time", "long"), f("page", "string"), f("ref", "string")))
    history = [("version 1", v1), ("version 2", v2)]
    assert compatibility_problems("BACKWARD", v3, history) == []
    assert any("version 1" in p for p in compatibility_problems("BACKWARD_TRANSITIVE", v3, history))
    with pytest.raises(ValueError, match="unknown compatibility level"):
        normalise_level("SIDEWAYS")
    assert normalise_level("full") == "FULL"
