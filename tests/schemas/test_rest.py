"""`ferry schemas serve` (a real process over a real ZooKeeper) against confluent-kafka's own schema registry
client and Avro serializers: the tools nobody here wrote register, read and check schemas through it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from ferry.schemas import AvroDeserializer as FerryDeserializer
from ferry.schemas import SchemaRegistry
from ferry.schemas.events import load
from tests.schemas.registry_http import call as _call
from tests.schemas.registry_http import serve_registry

USER_V1 = {"type": "record", "name": "User", "namespace": "t",
           "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}
USER_V2 = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}]}
USER_BAD = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "city", "type": "string"}]}  # no default


@pytest.fixture
def registry_url(zk_connect: str, tmp_path) -> Iterator[str]:
    with serve_registry(zk_connect, tmp_path / "serve.out") as url:
        yield url


def test_confluent_serializers_round_trip_and_ferry_decodes_the_same_bytes(registry_url: str, zk_connect: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    serializer = AvroSerializer(client, json.dumps(USER_V1))
    ctx = SerializationContext("users", MessageField.VALUE)
    payload = serializer({"name": "ada", "age": 36}, ctx)
    assert payload[0] == 0  # Confluent framing: magic 0 + 4-byte id + Avro body

    # the schema landed in ferry's ZooKeeper registry under the topic's value subject, with the same id
    with SchemaRegistry(zk_connect, read_only=True) as ferry_registry:
        latest = ferry_registry.latest("users-value")
        assert int.from_bytes(payload[1:5], "big") == latest.id
        assert FerryDeserializer(ferry_registry)(payload) == {"name": "ada", "age": 36}

    # a fresh client (no cache) reads it back by id
    fresh = SchemaRegistryClient({"url": registry_url})
    assert AvroDeserializer(fresh)(payload, ctx) == {"name": "ada", "age": 36}
    assert fresh.get_subjects() == ["users-value"]
    assert fresh.get_versions("users-value") == [1]
    assert fresh.get_latest_version("users-value").schema_id == latest.id


def test_a_schema_ferry_registered_serves_to_confluent_clients(registry_url: str, zk_connect: str) -> None:
    with SchemaRegistry(zk_connect) as ferry_registry:
        schema_id = ferry_registry.register("page_view", load("page_view"))
    client = SchemaRegistryClient({"url": registry_url})
    fetched = client.get_schema(schema_id)
    assert json.loads(fetched.schema_str)["name"] == "ferry.events.PageViewEvent"
    assert client.get_version("page_view", 1).schema_id == schema_id


def test_compatibility_is_the_registrys_and_incompatible_is_409(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    first = client.register_schema("users-value", Schema(json.dumps(USER_V1), "AVRO"))
    assert client.register_schema("users-value", Schema(json.dumps(USER_V1), "AVRO")) == first  # same id again
    assert client.test_compatibility("users-value", Schema(json.dumps(USER_V2), "AVRO")) is True
    assert client.test_compatibility("users-value", Schema(json.dumps(USER_BAD), "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("users-value", Schema(json.dumps(USER_BAD), "AVRO"))
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    assert "city" in refused.value.error_message
    second = client.register_schema("users-value", Schema(json.dumps(USER_V2), "AVRO"))
    assert second != first and client.get_versions("users-value") == [1, 2]
    # lookup of a registered schema under the subject
    found = client.lookup_schema("users-value", Schema(json.dumps(USER_V1), "AVRO"))
    assert (found.version, found.schema_id) == (1, first)

    assert client.get_compatibility() == "BACKWARD"
    client.set_compatibility("users-value", "NONE")
    assert client.get_compatibility("users-value") == "NONE"
    client.register_schema("users-value", Schema(json.dumps(USER_BAD), "AVRO"))  # allowed now


def test_errors_carry_the_registrys_codes(registry_url: str) -> None:
    assert _call(registry_url + "/subjects/nosuch/versions") == (
        404, {"error_code": 40401, "message": "Subject 'nosuch' not found."})
    assert _call(registry_url + "/schemas/ids/999")[1]["error_code"] == 40403
    status, body = _call(registry_url + "/subjects/s/versions", "POST", {"schema": "{not json"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = _call(registry_url + "/subjects/s/versions", "POST", {"schema": json.dumps(USER_V1)})
    assert status == 200 and body["id"] >= 1 and body["version"] == 1
    registered_id = body["id"]
    assert _call(registry_url + "/subjects/s/versions/7")[1]["error_code"] == 40402
    assert _call(registry_url + "/subjects/s/versions/x")[1]["error_code"] == 42202
    assert _call(registry_url + "/config", "PUT", {"compatibility": "SIDEWAYS"})[1]["error_code"] == 42203
    assert _call(registry_url + "/config/s")[1]["error_code"] == 40408
    assert _call(registry_url + "/config/s?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    status, body = _call(registry_url + "/subjects/s/versions", "POST",
                         {"schema": json.dumps(USER_V1), "schemaType": "PROTOBUF"})
    assert (status, body["error_code"]) == (422, 42201)
    assert _call(registry_url + "/subjects/s", "DELETE") == (200, [1])  # soft: the id stays resolvable
    assert _call(registry_url + f"/schemas/ids/{registered_id}")[0] == 200


def test_serve_refuses_a_bad_listen_address(zk_connect: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "ferry.cli", "schemas", "serve", "--listen", "nohost",
                           "--zookeeper", zk_connect], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "is not HOST:PORT" in proc.stderr and "Traceback" not in proc.stderr
