"""Schema references (``references: [{name, subject, version}]``) through `ferry schemas serve`, driven by
confluent-kafka's client and serializers: Avro named types from another subject, JSON Schema ``$ref`` by name,
Protobuf imports (the ProtobufSerializer registers the imported file itself); /referencedby, the 42206 refusal
of deleting a referenced version, and compatibility checked through the referenced schemas."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ferry.schemas import AvroDeserializer as FerryAvroDeserializer
from ferry.schemas import AvroSerializer as FerryAvroSerializer
from ferry.schemas import SchemaRegistry, schema_id_of
from ferry.schemas.replication import replicate
from tests.schemas.registry_http import call as _call

FDP = descriptor_pb2.FieldDescriptorProto


def _tag() -> str:
    return uuid.uuid4().hex[:8]


def _address(namespace: str, city_type: str = "string") -> str:
    return json.dumps({"type": "record", "name": "Address", "namespace": namespace,
                       "fields": [{"name": "city", "type": city_type}]})


def _customer(namespace: str, extra: list | None = None) -> str:
    fields = [{"name": "name", "type": "string"}, {"name": "home", "type": f"{namespace}.Address"},
              {"name": "work", "type": ["null", f"{namespace}.Address"], "default": None}, *(extra or [])]
    return json.dumps({"type": "record", "name": "Customer", "namespace": namespace, "fields": fields})


def test_avro_reference_round_trip_referencedby_and_delete_refused(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    ns, tag = f"ferry.ref{_tag()}", _tag()
    address_subject, customer_subject = f"address-{tag}", f"customers-{tag}-value"
    client.register_schema(address_subject, Schema(_address(ns), "AVRO"))
    ref = SchemaReference(f"{ns}.Address", address_subject, 1)
    customer = Schema(_customer(ns), "AVRO", [ref])
    customer_id = client.register_schema(customer_subject, customer)
    assert client.register_schema(customer_subject, customer) == customer_id  # idempotent, references included

    latest = client.get_latest_version(customer_subject)
    assert latest.schema.references == [ref]
    assert client.get_schema(customer_id).references == [ref]
    assert client.lookup_schema(customer_subject, customer).schema_id == customer_id
    # the same text with no references is another schema (it does not even parse alone)
    status, body = _call(f"{registry_url}/subjects/{customer_subject}", "POST", {"schema": _customer(ns)})
    assert (status, body["error_code"]) == (422, 42201), body

    ctx = SerializationContext(f"customers-{tag}", MessageField.VALUE)
    record = {"name": "ada", "home": {"city": "Oslo"}, "work": {"city": "Bergen"}}
    payload = AvroSerializer(client, customer, conf={"auto.register.schemas": False,
                                                       "use.latest.version": True})(record, ctx)
    assert int.from_bytes(payload[1:5], "big") == customer_id
    assert AvroDeserializer(client)(payload, ctx) == record

    status, body = _call(f"{registry_url}/subjects/{address_subject}/versions/1/referencedby")
    assert (status, body) == (200, [customer_id])
    for path in (f"/subjects/{address_subject}/versions/1", f"/subjects/{address_subject}"):
        status, body = _call(registry_url + path, "DELETE")
        assert (status, body["error_code"]) == (422, 42206), body
        assert "references exist" in body["message"]
    assert client.get_versions(address_subject) == [1]  # nothing deleted

    client.delete_subject(customer_subject)  # soft: the referencing schema no longer counts...
    assert _call(f"{registry_url}/subjects/{address_subject}/versions/1/referencedby") == (200, [])
    client.delete_subject(address_subject)  # ...so its reference can go (soft); permanent waits for it
    status, body = _call(f"{registry_url}/subjects/{address_subject}?permanent=true", "DELETE")
    assert (status, body["error_code"]) == (422, 42206), body
    assert client.get_schema(customer_id).references == [ref]  # the id still parses


def test_avro_compatibility_is_checked_through_references(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    ns, tag = f"ferry.ref{_tag()}", _tag()
    address_subject, customer_subject = f"address-{tag}", f"customers-{tag}-value"
    client.register_schema(address_subject, Schema(_address(ns), "AVRO"))
    client.set_compatibility(address_subject, "NONE")
    client.register_schema(address_subject, Schema(_address(ns, "int"), "AVRO"))  # city: string -> int
    client.register_schema(customer_subject, Schema(_customer(ns), "AVRO",
                                                    [SchemaReference(f"{ns}.Address", address_subject, 1)]))
    moved = Schema(_customer(ns), "AVRO", [SchemaReference(f"{ns}.Address", address_subject, 2)])
    assert not client.test_compatibility(customer_subject, moved)
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(customer_subject, moved)
    assert refused.value.http_status_code == 409 and "city" in refused.value.error_message
    # a reference given as -1 is pinned to the latest version when registered
    status, body = _call(f"{registry_url}/subjects/other-{tag}/versions", "POST", {
        "schema": _customer(ns), "references": [{"name": f"{ns}.Address", "subject": address_subject,
                                                  "version": -1}]})
    assert status == 200, body
    assert client.get_schema(body["id"]).references == [SchemaReference(f"{ns}.Address", address_subject, 2)]
    status, body = _call(f"{registry_url}/subjects/other-{tag}/versions", "POST", {
        "schema": _customer(ns), "references": [{"name": f"{ns}.Address", "subject": f"nope-{tag}", "version": 1}]})
    assert (status, body["error_code"]) == (422, 42201) and "not registered" in body["message"], body


PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
ORDER = {"type": "object", "properties": {"id": {"type": "integer"}, "buyer": {"$ref": "person.json"}},
         "required": ["id", "buyer"]}


def test_json_schema_ref_by_name(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    tag = _tag()
    person_subject, order_subject = f"person-{tag}", f"orders-{tag}-value"
    client.register_schema(person_subject, Schema(json.dumps(PERSON), "JSON"))
    order = Schema(json.dumps(ORDER), "JSON", [SchemaReference("person.json", person_subject, 1)])
    order_id = client.register_schema(order_subject, order)
    assert client.get_schema(order_id).references == [SchemaReference("person.json", person_subject, 1)]

    ctx = SerializationContext(f"orders-{tag}", MessageField.VALUE)
    serialize = JSONSerializer(order, client, conf={"auto.register.schemas": False, "use.latest.version": True})
    payload = serialize({"id": 7, "buyer": {"name": "ada"}}, ctx)
    assert JSONDeserializer(None, schema_registry_client=client)(payload, ctx) == {"id": 7, "buyer": {"name": "ada"}}
    with pytest.raises(SerializationError):  # the client resolved person.json through the registry's answer
        serialize({"id": 8, "buyer": {"nom": "ada"}}, ctx)

    # person v2 makes 'email' required (NONE on its own subject); an order moved onto it reads old orders badly
    client.set_compatibility(person_subject, "NONE")
    client.register_schema(person_subject, Schema(json.dumps({**PERSON, "required": ["name", "email"]}), "JSON"))
    moved = Schema(json.dumps(ORDER), "JSON", [SchemaReference("person.json", person_subject, 2)])
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(order_subject, moved)
    assert refused.value.http_status_code == 409 and "email" in refused.value.error_message
    assert _call(f"{registry_url}/subjects/{person_subject}/versions/1/referencedby") == (200, [order_id])


def _order_message_class(customer_file: str) -> type:
    """Order (order.proto) importing Customer from another file, built as generated _pb2 code does."""
    customer = descriptor_pb2.FileDescriptorProto(name=customer_file, package="shop", syntax="proto3")
    msg = customer.message_type.add(name="Customer")
    msg.field.add(name="name", number=1, type=FDP.TYPE_STRING, label=FDP.LABEL_OPTIONAL)
    order = descriptor_pb2.FileDescriptorProto(name=f"order_{_tag()}.proto", package="shop", syntax="proto3")
    order.dependency.append(customer_file)
    msg = order.message_type.add(name="Order")
    msg.field.add(name="id", number=1, type=FDP.TYPE_INT64, label=FDP.LABEL_OPTIONAL)
    msg.field.add(name="buyer", number=2, type=FDP.TYPE_MESSAGE, label=FDP.LABEL_OPTIONAL, type_name=".shop.Customer")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(customer)
    pool.Add(order)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_protobuf_serializer_registers_the_imported_file_as_a_reference(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    tag = _tag()
    customer_file = f"customer_{tag}.proto"  # the reference's name and (by default) its subject
    order_cls = _order_message_class(customer_file)
    ctx = SerializationContext(f"orders-{tag}", MessageField.VALUE)
    message = order_cls(id=5, buyer={"name": "ada"})
    payload = ProtobufSerializer(order_cls, client, conf={"use.deprecated.format": False})(message, ctx)

    latest = client.get_latest_version(f"orders-{tag}-value")
    assert latest.schema.references == [SchemaReference(customer_file, customer_file, 1)]
    assert client.get_versions(customer_file) == [1]
    assert int.from_bytes(payload[1:5], "big") == latest.schema_id
    assert ProtobufDeserializer(order_cls, {"use.deprecated.format": False})(payload, ctx) == message
    assert _call(f"{registry_url}/subjects/{customer_file}/versions/1/referencedby") == (200, [latest.schema_id])
    status, body = _call(f"{registry_url}/subjects/{customer_file}/versions/1", "DELETE")
    assert (status, body["error_code"]) == (422, 42206), body

    # .proto text importing the registered file by its name compiles against the reference
    text = (f'syntax = "proto3";\npackage shop;\nimport "{customer_file}";\n'
            "message Invoice {\n  int64 id = 1;\n  Customer to = 2;\n}\n")
    invoice = Schema(text, "PROTOBUF", [SchemaReference(customer_file, customer_file, 1)])
    invoice_id = client.register_schema(f"invoices-{tag}", invoice)
    assert client.get_schema(invoice_id).schema_str == text
    status, body = _call(f"{registry_url}/subjects/invoices2-{tag}/versions", "POST",
                         {"schema": text, "schemaType": "PROTOBUF"})  # the import without its reference
    assert (status, body["error_code"]) == (422, 42201), body
    assert customer_file in body["message"]


def test_references_replicate_with_their_ids(zk_connect: str) -> None:
    live = SchemaRegistry(f"{zk_connect}/live")
    offline = SchemaRegistry(f"{zk_connect}/offline")
    try:
        ns = f"ferry.ref{_tag()}"
        live.register("address", _address(ns))
        ref = [{"name": f"{ns}.Address", "subject": "address", "version": 1}]
        customer_id = live.register_version("customer", _customer(ns), references=ref).id
        replicate(live, offline)
        assert offline.stored(customer_id) == live.stored(customer_id)
        assert offline.get_typed(customer_id).references == live.get_typed(customer_id).references
        assert offline.get(customer_id) == live.get(customer_id)
        # ferry's own serializer and reader use the schema with Address inlined: it stands alone for fastavro
        record = {"name": "ada", "home": {"city": "Oslo"}, "work": None}
        payload = FerryAvroSerializer(live, "customer").serialize(record)
        assert schema_id_of(payload) == customer_id
        assert FerryAvroDeserializer(offline).deserialize(payload) == record
        assert offline.lookup("customer", _customer(ns), references=ref).id == customer_id
    finally:
        live.close()
        offline.close()
