"""Canonical form: one stored text per schema, and a clear error for an invalid one."""

from __future__ import annotations

import json

import pytest

from ferry.schemas import SchemaParseError
from ferry.schemas.canonical import canonical_json, fingerprint, load_schema
from ferry.schemas.events import EVENT_NAMES, load


def test_same_schema_different_text_same_canonical() -> None:
    a = '{"type":"record","name":"PV","namespace":"ferry.events","fields":[{"name":"a","type":{"type":"string"}}]}'
    b = json.dumps({"fields": [{"type": "string", "name": "a"}], "name": "ferry.events.PV", "type": "record"},
                   indent=4)
    assert canonical_json(load_schema(a)) == canonical_json(load_schema(b))
    assert fingerprint(load_schema(a)) == fingerprint(load_schema(b))
    assert load_schema("string") == load_schema('"string"') == load_schema({"type": "string"}) == "string"


def test_defaults_and_docs_are_kept() -> None:
    s = load_schema({"type": "record", "name": "R", "doc": "d",
                     "fields": [{"name": "a", "type": "int", "default": 3, "doc": "x"}]})
    assert s["doc"] == "d" and s["fields"][0]["default"] == 3


def test_event_schemas_parse() -> None:
    for name in EVENT_NAMES:
        schema = load_schema(load(name))
        fields = {f["name"]: f for f in schema["fields"]}
        assert fields["event_time"]["type"] == {"type": "long", "logicalType": "timestamp-millis"}
        assert {"host", "member_id", "page", "guid"} <= set(fields)


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ('{"type": "Nope"}', "unknown type"),
        ('{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}', "Default value"),
        ('{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"a","type":"long"}]}',
         "two fields named 'a'"),
        ('{"type":"enum","name":"E","symbols":["A","A"]}', "unique"),
        (b"\xff\xfe", "UTF-8"),
    ],
)
def test_invalid_schemas(schema, fragment: str) -> None:
    with pytest.raises(SchemaParseError) as info:
        load_schema(schema)
    assert fragment in str(info.value)
