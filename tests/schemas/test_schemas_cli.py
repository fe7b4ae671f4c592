"""`ferry schemas ...` as a subprocess (the real entry point) against a real ZooKeeper."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ferry.schemas import AvroDeserializer, AvroSerializer, SchemaRegistry
from ferry.schemas.events import load, schema_path


def ferry(*argv: str, stdin: str | None = None) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "ferry.cli", "schemas", *argv], capture_output=True, text=True,
                          input=stdin, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.slow
def test_round_trip(zk_connect: str, tmp_path: Path) -> None:
    zk = ["--zookeeper", zk_connect]
    rc, out, err = ferry("register", "page_view", "--schema-file", str(schema_path("page_view")), *zk)
    assert rc == 0, err
    assert "Registered subject page_view version 1 with id 1" in out
    rc, out, _ = ferry("register", "page_view", "--schema-file", str(schema_path("page_view")), *zk)
    assert rc == 0 and "already has this schema: version 1, id 1" in out

    # an incompatible v2 is refused, naming the field; a compatible one becomes version 2
    bad = load("page_view")
    bad["fields"].append({"name": "campaign", "type": "string"})
    (tmp_path / "bad.avsc").write_text(json.dumps(bad))
    rc, out, err = ferry("check", "page_view", "--schema-file", str(tmp_path / "bad.avsc"), *zk)
    assert rc == 1 and "'PageViewEvent.campaign'" in out
    rc, out, err = ferry("register", "page_view", "--schema-file", str(tmp_path / "bad.avsc"), *zk)
    assert rc == 2 and "'PageViewEvent.campaign'" in err and "no default" in err and "Traceback" not in err
    good = load("page_view")
    good["fields"].append({"name": "campaign", "type": ["null", "string"], "default": None})
    rc, out, err = ferry("register", "page_view", "--schema-file", "-", *zk, stdin=json.dumps(good))
    assert rc == 0 and "version 2 with id 2" in out, err

    rc, out, err = ferry("list", *zk, "--json")
    assert rc == 0, err
    assert json.loads(out) == [{"subject": "page_view", "versions": [1, 2], "latest_id": 2,
                                "compatibility": "BACKWARD"}]
    rc, out, _ = ferry("show", "page_view", *zk)
    doc = json.loads(out)
    assert (doc["version"], doc["id"]) == (2, 2) and doc["schema"]["fields"][-1]["name"] == "campaign"
    rc, out, _ = ferry("show", "page_view", "--version", "1", "--schema-only", *zk)
    assert "campaign" not in out and json.loads(out)["name"] == "ferry.events.PageViewEvent"
    rc, out, _ = ferry("show", "--id", "1", *zk)
    assert json.loads(out)["id"] == 1

    rc, out, _ = ferry("compat", "page_view", *zk)
    assert out.strip() == "BACKWARD (the default)"
    rc, out, err = ferry("compat", "page_view", "--level", "none", *zk)
    assert rc == 0 and "NONE" in out, err
    rc, out, err = ferry("register", "page_view", "--schema-file", str(tmp_path / "bad.avsc"), *zk)
    assert rc == 0 and "version 3" in out, err

    # what the CLI registered is what the library reads
    reg = SchemaRegistry(zk_connect)
    try:
        payload = AvroSerializer(reg, "page_view", load("page_view")).serialize(
            {"event_time": 1, "host": "h", "guid": "0f8fad5b-d9cb-469f-a165-70867728950e", "session_id": "s",
             "page": "feed", "path": "/feed"})
        assert AvroDeserializer(reg, reader_schema=good)(payload)["campaign"] is None
    finally:
        reg.close()


@pytest.mark.slow
def test_errors(zk_connect: str, zk_server, tmp_path: Path) -> None:
    zk = ["--zookeeper", zk_connect]
    rc, _, err = ferry("register", "x", "--schema-file", str(tmp_path / "missing.avsc"), *zk)
    assert rc == 1 and f"No such file or directory: {tmp_path / 'missing.avsc'}" in err  # runtime: exit 1
    (tmp_path / "broken.avsc").write_text("{nope")
    rc, _, err = ferry("register", "x", "--schema-file", str(tmp_path / "broken.avsc"), *zk)
    assert rc == 2 and "not valid JSON" in err
    rc, _, err = ferry("register", "bad/subject", "--schema-file", str(schema_path("click")), *zk)
    assert rc == 2 and "not allowed" in err
    rc, _, err = ferry("show", "nope", *zk)
    assert rc == 2 and "no schema is registered under subject 'nope'" in err
    rc, _, err = ferry("show", *zk)
    assert rc == 2 and "SUBJECT" in err
    rc, _, err = ferry("show", "--id", "77", *zk)
    assert rc == 2 and "schema id 77 is not registered" in err
    rc, _, err = ferry("compat", "x", "--level", "SIDEWAYS", *zk)
    assert rc == 2 and "invalid choice" in err
    rc, _, err = ferry("list", "--zookeeper", zk_server.connect + "/not/a/cluster")
    assert rc == 2 and "has no /not/a/cluster" in err
    for err in (ferry("register", "--help")[1], ferry("show", "--help")[1], ferry("compat", "--help")[1]):
        assert "--zookeeper" in err
    assert "--schema-file" in ferry("register", "--help")[1]
    assert "--version" in ferry("show", "--help")[1] and "--id" in ferry("show", "--help")[1]
    assert "--level" in ferry("compat", "--help")[1]


def test_copy(zk_connect: str) -> None:
    live, offline = zk_connect + "/live", zk_connect + "/offline"
    assert ferry("register", "search", "--schema-file", str(schema_path("search")), "--zookeeper", live)[0] == 0
    rc, out, err = ferry("copy", "--from-zookeeper", live, "--zookeeper", offline)
    assert rc == 0 and "Copied 1 schema id(s) and 1 subject version(s)" in out, err
    rc, out, _ = ferry("show", "search", "--zookeeper", offline)
    assert json.loads(out)["id"] == 1
    rc, _, err = ferry("copy", "--from-zookeeper", zk_connect + "/nowhere", "--zookeeper", offline)
    assert rc == 2 and "has no" in err


@pytest.mark.slow
def test_json_and_protobuf_subjects(zk_connect: str, tmp_path: Path) -> None:
    zk = ["--zookeeper", zk_connect]
    proto = tmp_path / "order.proto"
    proto.write_text('syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; int64 cents = 2; }\n')
    rc, out, err = ferry("register", "orders", "--schema-file", str(proto), "--schema-type", "protobuf", *zk)
    assert rc == 0 and "Registered subject orders version 1 with id 1" in out, err
    bad = tmp_path / "bad.proto"
    bad.write_text(proto.read_text().replace("int64 cents", "string cents"))
    rc, out, _ = ferry("check", "orders", "--schema-file", str(bad), "--schema-type", "PROTOBUF", *zk)
    assert rc == 1 and "INCOMPATIBLE" in out and "cents" in out
    rc, out, _ = ferry("show", "--id", "1", *zk)
    assert rc == 0 and json.loads(out)["schemaType"] == "PROTOBUF" and "message Order" in json.loads(out)["schema"]

    rc, out, err = ferry("register", "people", "--schema-file", "-", "--schema-type", "JSON", *zk,
                         stdin='{"type": "object", "properties": {"name": {"type": "string"}}}')
    assert rc == 0 and "version 1 with id 2" in out, err
    rc, out, _ = ferry("show", "people", *zk)
    assert json.loads(out)["schema"]["properties"]["name"] == {"type": "string"}
    rc, _, err = ferry("register", "people", "--schema-file", "-", "--schema-type", "JSON", *zk, stdin='{"type": 5}')
    assert rc == 2 and "Invalid JSON Schema" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
