"""SchemaRegistry against a real ZooKeeper."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from ferry.schemas import (
    AvroDeserializer,
    AvroSerializer,
    IncompatibleSchemaError,
    InvalidSubjectError,
    SchemaParseError,
    SchemaRegistry,
    UnknownSchemaError,
    UnknownSubjectError,
)
from ferry.schemas.canonical import canonical_json, load_schema
from ferry.schemas.events import EVENT_NAMES, load, sample
from ferry.zk import ClusterRegistry, ZkConnect


def pv(*extra: dict, member_type: str = "long") -> dict:
    return {"type": "record", "name": "PageViewEvent", "namespace": "ferry.events", "fields": [
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "host", "type": "string"},
        {"name": "member_id", "type": member_type},
        {"name": "page", "type": "string"},
        *extra,
    ]}


@pytest.fixture
def registries(zk_connect: str) -> Iterator[Callable[[], SchemaRegistry]]:
    made: list[SchemaRegistry] = []

    def make() -> SchemaRegistry:
        r = SchemaRegistry(zk_connect)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def test_register_get_versions(registries, zk_server, zk_connect: str) -> None:
    reg = registries()
    sid = reg.register("page_view", pv())
    assert reg.register("page_view", json.dumps(pv(), indent=2)) == sid  # same schema, other text
    assert reg.versions("page_view") == [1]
    latest = reg.latest("page_view")
    assert (latest.version, latest.id, latest.schema) == (1, sid, load_schema(pv()))
    assert reg.get(sid) == load_schema(pv())
    assert reg.register("page_view_copy", pv()) == sid  # same schema under another subject: same id
    assert reg.subjects() == ["page_view", "page_view_copy"]
    assert reg.lookup("page_view", pv()).version == 1 and reg.lookup("other", pv()) is None
    # what is in ZooKeeper, under the cluster chroot
    raw = KazooClient(hosts=zk_server.connect)
    raw.start(timeout=10)
    try:
        root = ZkConnect.parse(zk_connect).chroot + "/schemas"
        assert raw.get(f"{root}/ids/{sid}")[0].decode() == canonical_json(load_schema(pv()))
        assert raw.get(f"{root}/subjects/page_view/versions/1")[0] == str(sid).encode()
    finally:
        raw.stop()
        raw.close()


def test_incompatible_refused_compatible_gets_new_id_and_old_data_decodes(registries) -> None:
    reg = registries()
    v1_id = reg.register("page_view", pv())
    old_payload = AvroSerializer(reg, "page_view").serialize(
        {"event_time": 1_700_000_000_000, "host": "fe1", "member_id": 42, "page": "feed"})

    with pytest.raises(IncompatibleSchemaError) as info:
        reg.register("page_view", pv({"name": "referrer", "type": "string"}))
    assert "'PageViewEvent.referrer'" in str(info.value) and "no default" in str(info.value)
    assert info.value.problems
    with pytest.raises(IncompatibleSchemaError, match="'PageViewEvent.member_id'"):
        reg.register("page_view", pv(member_type="string"))
    assert reg.versions("page_view") == [1]  # nothing registered by the refusals

    v2 = pv({"name": "referrer", "type": ["null", "string"], "default": None},
            {"name": "locale", "type": "string", "default": "en_US"})
    v2_id = reg.register("page_view", v2)
    assert v2_id != v1_id and reg.versions("page_view") == [1, 2]
    assert reg.latest("page_view").id == v2_id

    record = AvroDeserializer(registries(), reader_schema=v2).deserialize(old_payload)
    assert record["member_id"] == 42 and record["referrer"] is None and record["locale"] == "en_US"
    assert record["event_time"].timestamp() == 1_700_000_000


def test_per_subject_levels(registries) -> None:
    reg = registries()
    reg.register("a", pv())
    reg.register("b", pv())
    assert reg.compatibility("a") == "BACKWARD"
    reg.set_compatibility("NONE", "a")
    assert reg.compatibility("a") == "NONE" and reg.compatibility("b") == "BACKWARD"
    reg.register("a", pv(member_type="string"))  # anything goes under NONE
    with pytest.raises(IncompatibleSchemaError):
        reg.register("b", pv(member_type="string"))

    reg.set_compatibility("FORWARD", "b")  # old readers must read new data: removing a field w/o default fails
    removed = pv()
    removed["fields"] = [fld for fld in removed["fields"] if fld["name"] != "host"]
    with pytest.raises(IncompatibleSchemaError, match="'PageViewEvent.host'"):
        reg.register("b", removed)
    reg.register("b", pv({"name": "extra", "type": "string"}))  # FORWARD allows a new field without default

    reg.set_compatibility("FULL")  # the registry default
    assert reg.compatibility("c") == "FULL" and reg.compatibility("b") == "FORWARD"
    reg.set_compatibility(None, "b")
    assert reg.compatibility("b") == "FULL"
    with pytest.raises(ValueError, match="unknown compatibility level"):
        reg.set_compatibility("SIDEWAYS", "b")


def test_errors(registries) -> None:
    reg = registries()
    with pytest.raises(UnknownSubjectError, match="no schema is registered under subject 'nope'"):
        reg.latest("nope")
    reg.register("x", pv())
    with pytest.raises(UnknownSubjectError, match="no version 5"):
        reg.version("x", 5)
    with pytest.raises(UnknownSchemaError, match="schema id 999 is not registered"):
        reg.get(999)
    for bad in ("", "a/b", "..", "x" * 256, "sp ace"):
        with pytest.raises(InvalidSubjectError):
            reg.register(bad, pv())
    with pytest.raises(SchemaParseError):
        reg.register("x", "{nope")
    assert reg.subjects() == ["x"]


def test_get_is_cached(registries) -> None:
    writer, reader = registries(), registries()
    sid = writer.register("s", pv())
    assert reader.get(sid) == load_schema(pv())
    reader._client.delete(f"/schemas/ids/{sid}")  # noqa: SLF001 - prove the second get does not ask ZooKeeper
    assert reader.get(sid) == load_schema(pv())
    with pytest.raises(UnknownSchemaError):
        registries().get(sid)


def test_concurrent_registration_unique_ids(zk_connect: str) -> None:
    """Two clients register overlapping sets of schemas at once: distinct schemas get distinct ids,
    identical schemas one id, and every subject gets gap-free versions."""
    shared = [pv({"name": f"shared_{i}", "type": "int", "default": 0}) for i in range(8)]
    results: dict[str, dict[str, int]] = {"a": {}, "b": {}}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def work(who: str) -> None:
        reg = SchemaRegistry(zk_connect)
        try:
            barrier.wait(timeout=30)
            for i in range(15):
                own = pv({"name": f"{who}_{i}", "type": "int", "default": i})
                results[who][f"own{i}"] = reg.register(f"{who}-subject-{i % 3}", own)
                results[who][f"shared{i % 8}"] = reg.register("shared-subject", shared[i % 8])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            reg.close()

    threads = [threading.Thread(target=work, args=(w,)) for w in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    own_ids = [v for who in "ab" for k, v in results[who].items() if k.startswith("own")]
    assert len(own_ids) == len(set(own_ids)) == 30
    for i in range(8):
        assert results["a"][f"shared{i}"] == results["b"][f"shared{i}"]
    shared_ids = {results["a"][f"shared{i}"] for i in range(8)}
    assert len(shared_ids) == 8 and not shared_ids & set(own_ids)
    check = SchemaRegistry(zk_connect)
    try:
        assert check.versions("shared-subject") == list(range(1, 9))
        assert sorted(check.version("shared-subject", v).id for v in range(1, 9)) == sorted(shared_ids)
        for who in "ab":
            for s in range(3):
                assert check.versions(f"{who}-subject-{s}") == [1, 2, 3, 4, 5]
    finally:
        check.close()


def test_shares_a_cluster_registry_session(zk_connect: str) -> None:
    with ClusterRegistry(zk_connect, timeout=4) as cluster:
        reg = SchemaRegistry(cluster)
        sid = reg.register("page_view", load("page_view"))
        reg.close()  # does not close the cluster's session
        assert cluster.client.exists(f"/schemas/ids/{sid}")


def test_event_schemas_register_and_round_trip(registries) -> None:
    reg = registries()
    de = AvroDeserializer(reg)
    for name in EVENT_NAMES:
        ser = AvroSerializer(reg, name, load(name))
        event = sample(name, event_time_ms=1_700_000_123_456, host="fe-1")
        back = de(ser(event))
        assert back["host"] == "fe-1" and back["member_id"] == event["member_id"]
        assert int(back["event_time"].timestamp() * 1000) == 1_700_000_123_456


def test_replication_preserves_ids(zk_connect: str) -> None:
    live = SchemaRegistry(zk_connect + "/live")
    offline = SchemaRegistry(zk_connect + "/offline")
    try:
        offline.register("local", pv({"name": "z", "type": "int", "default": 0}))  # takes id 1 there
        sid = live.register("page_view", pv())
        live_id2 = live.register("click", load("click"))
        offline.import_schema(live_id2, live.get(live_id2))
        offline.import_version("click", 1, live_id2)
        assert offline.latest("click").id == live_id2
        with pytest.raises(Exception, match="different schema"):
            offline.import_schema(1, live.get(sid))  # id 1 means something else there
        assert offline.register("new", pv({"name": "q", "type": "int", "default": 0})) > live_id2
    finally:
        live.close()
        offline.close()


def test_replicate_copies_what_is_missing(zk_connect: str) -> None:
    from ferry.schemas.replication import ReplicationResult, replicate

    live = SchemaRegistry(zk_connect + "/live")
    offline = SchemaRegistry(zk_connect + "/offline")
    try:
        ids = {name: live.register(name, load(name)) for name in EVENT_NAMES}
        v2 = load("click")
        v2["fields"].append({"name": "campaign", "type": ["null", "string"], "default": None})
        ids["click2"] = live.register("click", v2)
        assert replicate(live, offline) == ReplicationResult(4, 4)
        assert replicate(live, offline) == ReplicationResult(0, 0)  # idempotent
        for name in EVENT_NAMES:
            assert offline.latest(name).id == live.latest(name).id
        assert offline.versions("click") == [1, 2]
        payload = AvroSerializer(live, "click").serialize(
            sample("click", event_time_ms=1_700_000_000_000, host="fe") | {"campaign": "c1"})
        assert AvroDeserializer(offline)(payload)["campaign"] == "c1"  # mirrored bytes decode offline
    finally:
        live.close()
        offline.close()
