"""The mirror's schema replication (SchemaSync over replicate()) with JSON Schema and Protobuf ids and with
soft and permanent deletes: the offline registry ends up with the same ids, versions and delete marks."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from ferry.mirror.schema_sync import SchemaSync
from ferry.schemas import SchemaRegistry
from ferry.schemas.deletion import SubjectDeletion
from ferry.schemas.replication import ReplicationResult, replicate
from ferry.zk import ClusterRegistry

PERSON = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})
ORDER = 'syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; int64 cents = 2; }\n'


@pytest.fixture
def clusters(zk_server) -> Iterator[tuple[ClusterRegistry, ClusterRegistry]]:
    base = f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}"
    live, offline = ClusterRegistry(f"{base}/live").start(), ClusterRegistry(f"{base}/offline").start()
    yield live, offline
    live.stop()
    offline.stop()


def _wait_for(condition: Callable[[], bool], what: str, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_the_mirror_copies_json_and_protobuf_schemas_with_their_ids(clusters) -> None:
    live_zk, offline_zk = clusters
    live, offline = SchemaRegistry(live_zk), SchemaRegistry(offline_zk)
    live.register("pad", '"string"')
    live.register("pad2", '"int"')  # live ids 1 and 2 are Avro; the typed ones come after
    sync = SchemaSync(live_zk, offline_zk, interval_s=1.0).start()
    try:
        json_id = live.register("people-value", PERSON, "JSON")
        proto_id = live.register("orders-value", ORDER, "PROTOBUF")
        # one pass copies the subjects in name order: wait for both, not the first ("orders-value")
        _wait_for(lambda: _has(offline, "orders-value") and _has(offline, "people-value"), "both subjects offline")
        for subject, schema_id, kind in (("people-value", json_id, "JSON"), ("orders-value", proto_id, "PROTOBUF")):
            copied = offline.latest(subject)
            assert (copied.id, copied.schema_type) == (schema_id, kind)
            assert offline.get_typed(schema_id) == live.get_typed(schema_id)
        assert offline.id_of(ORDER, "PROTOBUF") == proto_id  # the fingerprint came along: re-registering finds it

        # a soft delete reaches offline (on the sync's interval), then the permanent one
        SubjectDeletion(live).delete_subject("people-value")
        _wait_for(lambda: "people-value" not in offline.subjects(), "the soft delete offline")
        assert offline.version("people-value", 1, deleted=True).deleted
        SubjectDeletion(live).delete_subject("people-value", permanent=True)
        _wait_for(lambda: "people-value" not in offline.subjects(deleted=True), "the permanent delete offline")
        assert offline.get_typed(json_id).schema_type == "JSON"  # ids stay: mirrored messages carry them
    finally:
        sync.stop()


def test_replicate_is_idempotent_and_leaves_offline_registrations_alone(clusters) -> None:
    live_zk, offline_zk = clusters
    live, offline = SchemaRegistry(live_zk), SchemaRegistry(offline_zk)
    live.register("people-value", PERSON, "JSON")
    live.register("orders-value", ORDER, "PROTOBUF")
    SubjectDeletion(live).delete_version("orders-value", 1)
    assert replicate(live, offline) == ReplicationResult(2, 2)
    assert replicate(live, offline) == ReplicationResult(0, 0)
    assert offline.versions("orders-value", deleted=True) == [1] and offline.subjects() == ["people-value"]
    offline.register("local", '"boolean"')  # not in live, not soft-deleted: never removed by the copy
    assert replicate(live, offline) == ReplicationResult(0, 0) and "local" in offline.subjects()
    # a READONLY replica (refusing registrations and deletes by users) still takes the live side's changes
    offline.set_mode("READONLY")
    SubjectDeletion(live).delete_version("orders-value", 1, permanent=True)
    live.register("people-value", json.dumps({"type": "object"}), "JSON")  # id 3 live; offline's "local" is id 3
    assert replicate(live, offline) == ReplicationResult(0, 1)  # the delete; never a version onto another schema
    assert "orders-value" not in offline.subjects(deleted=True) and offline.versions("people-value") == [1]
    assert offline.get_typed(3).schema_type == "AVRO"


def _has(registry: SchemaRegistry, subject: str) -> bool:
    return subject in registry.subjects()
