"""The wire format: magic 0 + 4-byte id + Avro body, and a clear error for every malformed payload."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from ferry.schemas import (
    AvroDeserializer,
    AvroSerializer,
    IncompatibleSchemaError,
    SchemaRegistry,
    SerializationError,
    UnknownSchemaError,
    WireFormatError,
    schema_id_of,
)

SCHEMA = {"type": "record", "name": "Click", "namespace": "ferry.events", "fields": [
    {"name": "event_time", "type": "long"}, {"name": "page", "type": "string"},
    {"name": "position", "type": ["null", "int"], "default": None}]}
RECORD = {"event_time": 5, "page": "/jobs", "position": 3}


@pytest.fixture
def registry(zk_connect: str) -> Iterator[SchemaRegistry]:
    r = SchemaRegistry(zk_connect)
    yield r
    r.close()


def test_layout_and_round_trip(registry: SchemaRegistry) -> None:
    ser = AvroSerializer(registry, "click", SCHEMA)
    payload = ser.serialize(RECORD)
    assert payload[0] == 0 and struct.unpack(">I", payload[1:5])[0] == ser.schema_id
    assert schema_id_of(payload) == ser.schema_id
    assert AvroDeserializer(registry).deserialize(payload) == RECORD
    # a serializer without a schema uses the subject's latest version
    assert AvroSerializer(registry, "click").schema_id == ser.schema_id


def test_malformed_payloads(registry: SchemaRegistry) -> None:
    ser = AvroSerializer(registry, "click", SCHEMA)
    good = ser.serialize(RECORD)
    de = AvroDeserializer(registry)
    with pytest.raises(WireFormatError, match="unknown magic byte 1"):
        de.deserialize(b"\x01" + good[1:])
    with pytest.raises(WireFormatError, match="too short"):
        de.deserialize(good[:3])
    with pytest.raises(UnknownSchemaError, match="schema id 4242 is not registered"):
        de.deserialize(b"\x00" + struct.pack(">I", 4242) + good[5:])
    with pytest.raises(WireFormatError, match="does not decode"):
        de.deserialize(good[:-2])  # truncated body
    with pytest.raises(WireFormatError, match="left over"):
        de.deserialize(good + b"\x00\x00")


def test_bad_records_are_refused(registry: SchemaRegistry) -> None:
    ser = AvroSerializer(registry, "click", SCHEMA)
    with pytest.raises(SerializationError, match="page"):
        ser.serialize({"event_time": 5, "page": 7})
    with pytest.raises(SerializationError, match="event_time"):
        ser.serialize({"page": "/x"})
    assert AvroDeserializer(registry)(ser({"event_time": 1, "page": "/x"}))["position"] is None  # default used


def test_reader_schema_incompatible_with_writer(registry: SchemaRegistry) -> None:
    payload = AvroSerializer(registry, "click", SCHEMA).serialize(RECORD)
    reader = {**SCHEMA, "fields": SCHEMA["fields"] + [{"name": "target", "type": "string"}]}
    with pytest.raises(IncompatibleSchemaError, match="'Click.target'"):
        AvroDeserializer(registry, reader_schema=reader).deserialize(payload)
