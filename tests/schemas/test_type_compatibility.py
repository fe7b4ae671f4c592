"""JSON Schema and Protobuf compatibility rules (schema_types.typed_problems), each rule in both directions."""

from __future__ import annotations

import json

import pytest

from ferry.schemas.errors import SchemaParseError
from ferry.schemas.schema_types import parse_typed, typed_problems

OBJ = {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": False}


def js(schema: object):
    return parse_typed(json.dumps(schema), "JSON")


def problems(level: str, new: object, old: object) -> list[str]:
    return typed_problems(level, js(new), [("version 1", js(old))])


@pytest.mark.parametrize(("new", "old", "backward_ok", "forward_ok"), [
    # a property added to a closed model: old documents cannot hold it
    ({**OBJ, "properties": {**OBJ["properties"], "age": {"type": "integer"}}}, OBJ, True, False),
    # a property added where the old model was open: old documents may hold anything under that name
    ({"type": "object", "properties": {"age": {"type": "integer"}}}, {"type": "object"}, False, True),
    # required added
    ({**OBJ, "required": ["name"]}, OBJ, False, True),
    # type widened integer -> number
    ({"type": "number"}, {"type": "integer"}, True, False),
    # type changed string -> integer
    ({"type": "integer"}, {"type": "string"}, False, False),
    # union widened
    ({"type": ["string", "null"]}, {"type": "string"}, True, False),
    # enum grown
    ({"enum": ["a", "b", "c"]}, {"enum": ["a", "b"]}, True, False),
    # maxLength tightened
    ({"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 10}, False, True),
    # nested property type narrowed
    ({**OBJ, "properties": {"name": {"type": "string", "minLength": 3}}}, OBJ, False, True),
    # array items widened
    ({"type": "array", "items": {"type": "number"}}, {"type": "array", "items": {"type": "integer"}}, True, False),
    # closing an open model
    ({"type": "object", "additionalProperties": False}, {"type": "object"}, False, True),
])
def test_json_schema_rules(new: dict, old: dict, backward_ok: bool, forward_ok: bool) -> None:
    assert (not problems("BACKWARD", new, old)) is backward_ok, problems("BACKWARD", new, old)
    assert (not problems("FORWARD", new, old)) is forward_ok, problems("FORWARD", new, old)
    assert (not problems("FULL", new, old)) is (backward_ok and forward_ok)
    assert problems("NONE", new, old) == []


def test_json_problems_name_the_property_and_transitive_checks_every_version() -> None:
    required = {**OBJ, "required": ["name"]}
    assert any("name" in p for p in problems("BACKWARD", required, OBJ))
    # version 3 re-adds "name" with another type: the transitive level checks version 1 (a string "name") too
    v1, v2 = OBJ, {"type": "object", "additionalProperties": False}
    v3 = {"type": "object", "properties": {"name": {"type": "integer"}}, "additionalProperties": False}
    history = [("version 1", js(v1)), ("version 2", js(v2))]
    assert typed_problems("FORWARD", js(v2), history[:1]) == []
    assert typed_problems("FORWARD_TRANSITIVE", js(v3), history) != []
    assert any("version 1" in p for p in typed_problems("FORWARD_TRANSITIVE", js(v3), history))


def test_invalid_json_schema_refused() -> None:
    with pytest.raises(SchemaParseError, match="Invalid JSON Schema"):
        js({"type": "strin"})
    with pytest.raises(SchemaParseError, match="not JSON"):
        parse_typed("{nope", "JSON")
    with pytest.raises(SchemaParseError, match="Invalid schema type"):
        parse_typed("{}", "XML")


PROTO = """syntax = "proto3";
package shop;
message Order {
  string id = 1;
  int64 cents = 2;
  Item item = 3;
  oneof paid { string card = 4; string cash = 5; }
}
message Item { string sku = 1; }
"""


def proto(text: str):
    return parse_typed(text, "PROTOBUF")


def proto_problems(new_text: str) -> list[str]:
    return typed_problems("BACKWARD", proto(new_text), [("version 1", proto(PROTO))])


@pytest.mark.parametrize(("change", "ok"), [
    (("int64 cents = 2;", "int64 cents = 2;\n  string note = 6;"), True),  # field added
    (("int64 cents = 2;", ""), True),  # field removed
    (("int64 cents = 2;", "int64 amount_cents = 2;"), True),  # field renamed (numbers are the wire identity)
    (("int64 cents = 2;", "uint64 cents = 2;"), True),  # same wire type (varint)
    (("int64 cents = 2;", "string cents = 2;"), False),  # varint -> length-delimited
    (("int64 cents = 2;", "sint64 cents = 2;"), False),  # zigzag varint differs
    (("string id = 1;", "bytes id = 1;"), True),
    (("Item item = 3;", "string item = 3;"), False),  # message -> string
    (("message Item { string sku = 1; }", "message Item { string sku = 1; }\nmessage Other { int32 x = 1; }"), True),
    (("message Item { string sku = 1; }", "message Article { string sku = 1; }"), True),  # renamed in place
    (("message Item { string sku = 1; }", "message Article { int32 sku = 1; }"), False),  # renamed, type changed
    (("package shop;", "package store;"), False),
    (("oneof paid { string card = 4; string cash = 5; }", "string card = 4;\n  string cash = 5;"), False),
])
def test_protobuf_rules(change: tuple[str, str], ok: bool) -> None:
    old, new = change
    text = PROTO.replace(old, new)
    if "Article" in new:
        text = text.replace("Item item = 3;", "Article item = 3;")
    assert (not proto_problems(text)) is ok, proto_problems(text)


def test_protobuf_removed_message_and_base64_form() -> None:
    gone = PROTO.replace("message Item { string sku = 1; }", "").replace("Item item = 3;", "")
    # a message gone while another takes its place is a rename (the wire format carries no message names)
    assert proto_problems(gone + "message Extra { string sku = 1; }\n") == []
    removed = typed_problems("BACKWARD", proto('syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; }\n'),
                             [("version 1", proto(PROTO))])
    assert any("Item" in p and "removed" in p for p in removed)
    # the base64 FileDescriptorProto form (what confluent-kafka's serializer sends) parses to the same messages
    as_b64 = proto(proto(PROTO).serialized())
    assert as_b64.schema_type == "PROTOBUF" and as_b64.text == proto(PROTO).serialized()
    assert typed_problems("FULL", as_b64, [("version 1", proto(PROTO))]) == []


def test_invalid_protobuf_refused_with_protocs_reason() -> None:
    with pytest.raises(SchemaParseError, match="Invalid Protobuf schema") as info:
        proto('syntax = "proto3";\nmessage Broken { string a = 1 }\n')
    assert "schema.proto:2" in str(info.value)
    with pytest.raises(SchemaParseError, match="Invalid Protobuf schema"):
        proto('syntax = "proto3";\nimport "other.proto";\nmessage A { string a = 1; }\n')
