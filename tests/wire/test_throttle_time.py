"""Where throttle_time_ms sits in each answer the broker serves (wire/protocol/throttle_time.py), checked against
Kafka's own message specs (the JSON files kafka-python ships): the first version with the field, the first
flexible version, and the field's place (first; OffsetDelete after its error code; Produce last)."""

from __future__ import annotations

import importlib.resources

from kafka.protocol.schemas.load_json import load_json

from ferry.wire.protocol.api_keys import ADVERTISED
from ferry.wire.protocol.throttle_time import FIELD, LAST, field_offset

NOT_THROTTLED = {17, 18, 27, 36}  # SaslHandshake, ApiVersions, WriteTxnMarkers, SaslAuthenticate


def _specs() -> dict[int, dict]:
    out = {}
    for f in importlib.resources.files("kafka.protocol.schemas.resources").iterdir():
        if f.name.endswith("Response.json"):
            spec = load_json(f.name[:-len(".json")])
            out[spec["apiKey"]] = spec
    return out


def _since(versions: str) -> int:
    assert versions.endswith("+"), versions
    return int(versions[:-1])


def test_every_served_api_with_the_field_is_in_the_table_as_kafkas_spec_has_it():
    specs = _specs()
    checked = 0
    for key in ADVERTISED:
        spec = specs.get(key)
        if spec is None:  # the KIP-848 APIs are newer than the bundled specs: first field, flexible from v0
            assert FIELD[key] == (0, 0, 0)
            continue
        fields = [f["name"] for f in spec["fields"]]
        if "ThrottleTimeMs" not in fields or key in NOT_THROTTLED:
            assert key not in FIELD, key
            continue
        at = fields.index("ThrottleTimeMs")
        since = _since(spec["fields"][at]["versions"])
        flexible = spec["flexibleVersions"]
        first_flexible = None if flexible == "none" else _since(flexible)
        last = all("taggedVersions" in f for f in spec["fields"][at + 1:])  # only tagged fields after it
        where = 0 if at == 0 else 2 if fields[:at] == ["ErrorCode"] else LAST if last else None
        assert FIELD[key] == (since, first_flexible, where), spec["name"]
        checked += 1
    assert checked >= 35


def test_offsets_in_flexible_and_older_versions():
    assert field_offset(3, 2) is None and field_offset(3, 8) == 0 and field_offset(3, 12) == 1  # Metadata
    assert field_offset(0, 0) is None and field_offset(0, 8) == LAST  # Produce
    assert field_offset(47, 0) == 2  # OffsetDelete: after the error code
    assert field_offset(18, 2) is None  # ApiVersions: not throttled
