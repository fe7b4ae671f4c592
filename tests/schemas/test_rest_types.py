"""`ferry schemas serve` (a real process over a real ZooKeeper) with JSON Schema and Protobuf subjects, deletes,
/mode and /contexts, driven by confluent-kafka's own client and its JSON/Protobuf serializers; every error
answer is checked for Confluent's body {"error_code", "message"}."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from ferry.schemas import SchemaRegistry
from tests.schemas.registry_http import call as _call

FDP = descriptor_pb2.FieldDescriptorProto
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name"], "additionalProperties": False}
PERSON_V2 = {**PERSON, "properties": {**PERSON["properties"], "email": {"type": "string"}}}  # closed: adding is fine
PERSON_BAD = {**PERSON, "required": ["name", "age"]}  # newly required: old documents lack it
ORDER_PROTO = 'syntax = "proto3";\npackage shop;\nmessage Order {\n  string id = 1;\n  int64 cents = 2;\n}\n'
ORDER_PROTO_V2 = ORDER_PROTO.replace("int64 cents = 2;", "int64 cents = 2;\n  string note = 3;")
ORDER_PROTO_BAD = ORDER_PROTO.replace("int64 cents = 2;", "string cents = 2;")  # varint -> length-delimited


def _user_message_class() -> type:
    """A Protobuf message class built from a descriptor (what generated _pb2 code does at import)."""
    fdp = descriptor_pb2.FileDescriptorProto(name=f"ferry_test_{uuid.uuid4().hex[:8]}.proto", package="ferry.test",
                                             syntax="proto3")
    msg = fdp.message_type.add(name="User")
    msg.field.add(name="name", number=1, type=FDP.TYPE_STRING, label=FDP.LABEL_OPTIONAL)
    msg.field.add(name="visits", number=2, type=FDP.TYPE_INT64, label=FDP.LABEL_OPTIONAL)
    fdp.dependency.append("google/protobuf/timestamp.proto")  # a well-known import: no reference registered
    msg.field.add(name="seen", number=3, type=FDP.TYPE_MESSAGE, label=FDP.LABEL_OPTIONAL,
                  type_name=".google.protobuf.Timestamp")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(timestamp_pb2.DESCRIPTOR.serialized_pb))
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("ferry.test.User"))


def _error(result: tuple[int, object]) -> tuple[int, int]:
    """(HTTP status, error_code) of an error answer, checking the body is exactly Confluent's shape."""
    status, body = result
    assert isinstance(body, dict) and set(body) == {"error_code", "message"}, body
    assert isinstance(body["message"], str) and body["message"]
    return status, body["error_code"]


def _subject(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_types_listed(registry_url: str) -> None:
    assert SchemaRegistryClient({"url": registry_url}).get_schema_types() == ["JSON", "PROTOBUF", "AVRO"]


def test_json_serializer_round_trip_and_compatibility(registry_url: str, registry_zk: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    topic = _subject("people")
    ctx = SerializationContext(topic, MessageField.VALUE)
    payload = JSONSerializer(json.dumps(PERSON), client)({"name": "ada", "age": 36}, ctx)
    schema_id = int.from_bytes(payload[1:5], "big")
    fresh = SchemaRegistryClient({"url": registry_url})
    assert JSONDeserializer(None, schema_registry_client=fresh)(payload, ctx) == {"name": "ada", "age": 36}
    fetched = fresh.get_schema(schema_id)
    assert fetched.schema_type == "JSON" and json.loads(fetched.schema_str) == PERSON
    with SchemaRegistry(registry_zk, read_only=True) as ferry_registry:  # stored in ferry's ZooKeeper registry
        assert ferry_registry.latest(f"{topic}-value").schema_type == "JSON"

    subject = f"{topic}-value"
    assert client.test_compatibility(subject, Schema(json.dumps(PERSON_V2), "JSON")) is True
    assert client.test_compatibility(subject, Schema(json.dumps(PERSON_BAD), "JSON")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(PERSON_BAD), "JSON"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    assert "age" in refused.value.error_message
    assert client.register_schema(subject, Schema(json.dumps(PERSON_V2), "JSON")) != schema_id
    # an Avro schema cannot follow a JSON one under BACKWARD
    with pytest.raises(SchemaRegistryError) as changed:
        client.register_schema(subject, Schema('"string"', "AVRO"))
    assert changed.value.error_code == 409 and "schema type changed" in changed.value.error_message
    status, code = _error(_call(registry_url + f"/subjects/{subject}/versions", "POST",
                                {"schema": '{"type": "strin"}', "schemaType": "JSON"}))
    assert (status, code) == (422, 42201)


def test_protobuf_serializer_round_trip(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    user = _user_message_class()
    topic = _subject("visits")
    ctx = SerializationContext(topic, MessageField.VALUE)
    record = user(name="ada", visits=7)
    record.seen.seconds = 1_700_000_000
    payload = ProtobufSerializer(user, client)(record, ctx)
    decoded = ProtobufDeserializer(user, {}, SchemaRegistryClient({"url": registry_url}))(payload, ctx)
    assert (decoded.name, decoded.visits, decoded.seen.seconds) == ("ada", 7, 1_700_000_000)
    schema_id = int.from_bytes(payload[1:5], "big")
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema_id == schema_id and registered.schema.schema_type == "PROTOBUF"
    status, body = _call(registry_url + f"/schemas/ids/{schema_id}?format=serialized")
    assert status == 200 and body["schemaType"] == "PROTOBUF"
    parsed = descriptor_pb2.FileDescriptorProto.FromString(__import__("base64").b64decode(body["schema"]))
    assert [f.name for f in parsed.message_type[0].field] == ["name", "visits", "seen"]


def test_protobuf_text_compatibility(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    subject = _subject("orders")
    first = client.register_schema(subject, Schema(ORDER_PROTO, "PROTOBUF"))
    assert client.register_schema(subject, Schema(ORDER_PROTO, "PROTOBUF")) == first
    assert client.test_compatibility(subject, Schema(ORDER_PROTO_V2, "PROTOBUF")) is True
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(ORDER_PROTO_BAD, "PROTOBUF"))
    assert refused.value.error_code == 409 and "cents" in refused.value.error_message
    second = client.register_schema(subject, Schema(ORDER_PROTO_V2, "PROTOBUF"))
    assert second != first and client.get_versions(subject) == [1, 2]
    assert client.get_version(subject, 2).schema.schema_str == ORDER_PROTO_V2
    assert _call(f"{registry_url}/subjects/{subject}/versions/1/referencedby") == (200, [])
    found = client.lookup_schema(subject, Schema(ORDER_PROTO, "PROTOBUF"))
    assert (found.version, found.schema_id) == (1, first)
    status, code = _error(_call(registry_url + f"/subjects/{subject}/versions", "POST",
                                {"schema": "message { nope", "schemaType": "PROTOBUF"}))
    assert (status, code) == (422, 42201)


def test_soft_and_permanent_deletes(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    subject = _subject("del")
    v1 = client.register_schema(subject, Schema(json.dumps(PERSON), "JSON"))
    v2 = client.register_schema(subject, Schema(json.dumps(PERSON_V2), "JSON"))
    url = f"{registry_url}/subjects/{subject}"
    assert _error(_call(url + "/versions/1?permanent=true", "DELETE")) == (404, 40407)
    assert client.delete_version(subject, 1) == 1
    assert _error(_call(url + "/versions/1", "DELETE")) == (404, 40406)
    assert _error(_call(url + "/versions/1")) == (404, 40402)
    assert _call(url + "/versions/1?deleted=true")[1]["id"] == v1
    assert client.get_versions(subject) == [2] and _call(url + "/versions?deleted=true")[1] == [1, 2]
    assert client.delete_version(subject, 1, permanent=True) == 1
    assert _call(url + "/versions?deleted=true")[1] == [2]
    assert _error(_call(url + "/versions/9", "DELETE")) == (404, 40402)

    assert _error(_call(url + "?permanent=true", "DELETE")) == (404, 40405)
    assert client.delete_subject(subject) == [2]
    assert subject not in client.get_subjects() and subject in _call(registry_url + "/subjects?deleted=true")[1]
    assert _error(_call(url + "/versions")) == (404, 40401)
    v2_body = {"schema": json.dumps(PERSON_V2), "schemaType": "JSON"}
    assert _error(_call(url, "POST", v2_body)) == (404, 40401)  # lookup hides soft-deleted subjects...
    assert _call(url + "?deleted=true", "POST", v2_body)[1]["version"] == 2  # ...unless asked
    assert _error(_call(url, "DELETE")) == (404, 40404)
    assert _call(f"{registry_url}/schemas/ids/{v2}")[0] == 200  # ids stay: written messages carry them
    # the same schema again reuses its id, as a new version
    again = _call(url + "/versions", "POST", {"schema": json.dumps(PERSON_V2), "schemaType": "JSON"})[1]
    assert (again["id"], again["version"]) == (v2, 3)
    assert client.delete_subject(subject) == [3]
    assert client.delete_subject(subject, permanent=True) == [2, 3]
    assert _error(_call(url + "/versions?deleted=true")) == (404, 40401)
    assert _error(_call(f"{registry_url}/subjects/{_subject('none')}", "DELETE")) == (404, 40401)


def test_modes(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    subject = _subject("mode")
    client.register_schema(subject, Schema(json.dumps(PERSON), "JSON"))
    assert client.get_global_mode() == "READWRITE"
    assert _error(_call(f"{registry_url}/mode/{subject}")) == (404, 40409)
    assert _call(f"{registry_url}/mode/{subject}?defaultToGlobal=true") == (200, {"mode": "READWRITE"})
    assert client.update_mode(subject, "READONLY") == "READONLY"
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(PERSON_V2), "JSON"))
    assert (refused.value.http_status_code, refused.value.error_code) == (422, 42205)
    assert _error(_call(f"{registry_url}/subjects/{subject}", "DELETE")) == (422, 42205)
    assert client.delete_mode(subject) == "READONLY"
    assert _error(_call(f"{registry_url}/mode/{subject}", "DELETE")) == (404, 40409)
    assert _error(_call(f"{registry_url}/mode/{subject}", "PUT", {"mode": "SIDEWAYS"})) == (422, 42204)
    # IMPORT: only on an empty subject unless forced; registrations keep their given id and version
    assert _error(_call(f"{registry_url}/mode/{subject}", "PUT", {"mode": "IMPORT"})) == (422, 42205)
    assert _call(f"{registry_url}/mode/{subject}?force=true", "PUT", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    imported = _subject("imported")
    assert client.update_mode(imported, "IMPORT") == "IMPORT"
    migrated = ORDER_PROTO.replace("package shop;", "package migrated;")
    body = {"schema": migrated, "schemaType": "PROTOBUF", "id": 4242, "version": 7}
    assert _call(f"{registry_url}/subjects/{imported}/versions", "POST", body) == (
        200, {"subject": imported, "version": 7, "id": 4242, "schema": migrated, "schemaType": "PROTOBUF"})
    assert client.get_version(imported, 7).schema_id == 4242
    taken = {"schema": migrated.replace("Order", "Refund"), "schemaType": "PROTOBUF", "id": 4242, "version": 8}
    status, body = _call(f"{registry_url}/subjects/{imported}/versions", "POST", taken)
    assert _error((status, body)) == (422, 42205) and "4242" in body["message"]
    client.delete_mode(imported)
    with_id = {"schema": migrated.replace("Order", "Return"), "schemaType": "PROTOBUF", "id": 5000}
    assert _error(_call(f"{registry_url}/subjects/{imported}/versions", "POST", with_id)) == (422, 42205)
    # a new id allocated in READWRITE never collides with the imported one
    assert client.register_schema(_subject("after"), Schema('{"type": "boolean"}', "JSON")) > 4242


def test_contexts(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    client.register_schema(":.staging:clicks", Schema('{"type": "number"}', "JSON"))
    client.register_schema(":.:qualified-default", Schema('{"type": "string"}', "JSON"))
    assert client.get_contexts() == [".", ".staging"]
    assert "qualified-default" in client.get_subjects()
    assert client.get_versions(":.:qualified-default") == [1]


def test_error_bodies_on_every_path(registry_url: str) -> None:
    assert _error(_call(registry_url + "/no/such/route")) == (404, 404)
    assert _error(_call(registry_url + "/subjects", "PUT", {})) == (405, 405)
    assert _error(_call(registry_url + "/schemas/ids/abc")) == (404, 404)
    assert _error(_call(registry_url + "/subjects/x/versions", "POST", raw=b"{not json")) == (400, 400)
    assert _error(_call(registry_url + "/config", "PUT", raw=b"\xff")) == (400, 400)
    assert _error(_call(registry_url + "/subjects/x/versions", "POST", {"schema": "{}", "schemaType": "XML"})) \
        == (422, 42201)
    assert _error(_call(registry_url + "/subjects/x/versions", "POST", {"schema": "{}", "version": 0})) \
        == (422, 42202)
    assert _error(_call(registry_url + "/subjects/bad%20name/versions", "POST", {"schema": "{}"})) == (422, 42208)


def test_global_modes(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    client.register_schema(_subject("global"), Schema('{"type": "null"}', "JSON"))  # the registry is not empty
    assert _error(_call(f"{registry_url}/mode", "PUT", {"mode": "IMPORT"})) == (422, 42205)
    assert client.update_global_mode("READONLY") == "READONLY"
    try:
        status, code = _error(_call(f"{registry_url}/subjects/{_subject('ro')}/versions", "POST",
                                    {"schema": '{"type": "array"}', "schemaType": "JSON"}))
        assert (status, code) == (422, 42205)
    finally:
        assert client.update_global_mode("READWRITE") == "READWRITE"
    assert client.get_global_mode() == "READWRITE"
