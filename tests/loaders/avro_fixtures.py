"""Avro values for the decoder tests: every column type the warehouse maps, the demo's events, and the
records a load must refuse (not the wire format, unknown id, corrupt bodies), as raw source batches."""

from __future__ import annotations

import datetime as dt
import io
import random
import struct
import uuid

import fastavro

from ferry.schemas.events import EVENT_NAMES, load, sample

EVERYTHING = {
    "type": "record", "name": "Everything", "namespace": "ferry.test",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": ["null", "long"]},
        {"name": "f", "type": "float"},
        {"name": "d", "type": ["double", "null"]},
        {"name": "s", "type": ["null", "string"]},
        {"name": "raw", "type": "bytes"},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "fx2", "type": ["null", "Four"]},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "u", "type": ["null", {"type": "string", "logicalType": "uuid"}]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "micros", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "inner", "type": ["null", {"type": "record", "name": "Inner", "fields": [
            {"name": "x", "type": "int"}, {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
            {"name": "color", "type": ["null", "Color"]}]}]},
        {"name": "nested", "type": {"type": "array", "items": "Inner"}},
        {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "long"}}},
        {"name": "mm", "type": ["null", {"type": "map", "values": ["null", "double"]}]},
    ],
}
DECIMAL = {"type": "record", "name": "Money", "fields": [
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "note", "type": "string"}]}


def everything(rng: random.Random, i: int) -> dict:
    def inner(j: int) -> dict:
        return {"x": j, "tags": [None if k % 3 == 0 else f"t{k}é" for k in range(j % 4)],
                "color": None if j % 2 else ["RED", "GREEN", "BLUE"][j % 3]}

    return {
        "b": i % 2 == 0, "i": rng.randrange(-2**31, 2**31), "l": None if i % 3 == 0 else rng.randrange(-2**63, 2**63),
        "f": rng.random() * 1e6, "d": None if i % 4 == 0 else rng.random(), "s": None if i % 5 == 0 else f"ü{i}" * (i % 7),
        "raw": rng.randbytes(i % 9), "fx": rng.randbytes(4), "fx2": None if i % 2 else rng.randbytes(4),
        "e": ["RED", "GREEN", "BLUE"][i % 3], "u": None if i % 6 == 0 else str(uuid.UUID(int=rng.getrandbits(128))),
        "day": dt.date(1970, 1, 1) + dt.timedelta(days=rng.randrange(-700_000, 2_900_000)),
        "micros": None if i % 7 == 0 else dt.datetime(2024, 5, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=i * 1001),
        "local": dt.datetime(2024, 5, 1) + dt.timedelta(milliseconds=i * 37),
        "inner": None if i % 3 == 1 else inner(i), "nested": [inner(i + k) for k in range(i % 3)],
        "m": {f"k{k}": list(range(k)) for k in range(i % 4)},
        "mm": None if i % 2 else {"a": None, "b": float(i)},
    }


def body(schema: dict, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


# Hive's metastore (2.3) has no timestamp_ntz columns: a table cannot hold local-timestamp-* fields
EVERYTHING_HIVE = dict(EVERYTHING, fields=[f for f in EVERYTHING["fields"] if f["name"] != "local"])
SCHEMAS = {"everything": EVERYTHING, "decimal": DECIMAL, **{name: load(name) for name in EVENT_NAMES}}
HIVE_SCHEMAS = dict(SCHEMAS, everything=EVERYTHING_HIVE)
IDS = {"everything": 1, "decimal": 2, "page_view": 10, "click": 11, "search": 12}


def values(seed: int = 7, n: int = 300, ids: dict[str, int] | None = None, hive: bool = False
           ) -> tuple[dict[int, dict], list[tuple[bytes | None, int | None]]]:
    """({schema id: schema}, [(value, timestamp ms)]): good records of every schema, interleaved with bad
    ones (each kind of refusal at least once). ``ids``: schema name -> id (default IDS; 999 stays unknown);
    ``hive``: only what a Hive table can hold (HIVE_SCHEMAS)."""
    import decimal

    ids = ids or IDS
    rng = random.Random(seed)
    everything_schema = EVERYTHING_HIVE if hive else EVERYTHING
    schemas = {ids[name]: schema for name, schema in (HIVE_SCHEMAS if hive else SCHEMAS).items()}
    ts0 = 1_714_521_600_000
    out: list[tuple[bytes | None, int | None]] = []
    for i in range(n):
        ts = ts0 + i * 61_000
        out.append((framed(ids["everything"], body(everything_schema, everything(rng, i))), ts))
        for name in EVENT_NAMES:
            out.append((framed(ids[name], body(load(name), sample(name, rng, ts))), ts))
        if i % 50 == 0:
            out.append((framed(ids["decimal"], body(DECIMAL, {"amount": decimal.Decimal(f"{i}.25"), "note": "n"})),
                        ts))
    good_pv = framed(ids["page_view"], body(load("page_view"), sample("page_view", rng, ts0)))
    bad = [
        (None, ts0), (b"", ts0), (b"\x00\x00", ts0), (b"not avro at all", ts0),  # not the wire format
        (framed(999, b"\x02"), ts0),  # unknown schema id
        (good_pv[:-3], ts0), (good_pv + b"\x00", ts0),  # truncated, bytes left over
        (framed(ids["page_view"], b"\xff" * 20), ts0),  # garbage body
        (good_pv, None),  # no timestamp
        (good_pv, 400_000_000_000_000),  # a timestamp beyond year 9999
    ]
    for j, item in enumerate(bad):
        out.insert(17 * (j + 1), item)
    return schemas, out


def odd_values() -> tuple[dict[int, dict], list[tuple[bytes | None, int | None]]]:
    """Records the native decoder hands to the careful path: a non-canonical uuid, invalid UTF-8, a
    timestamp datetime cannot hold, a duplicate map key, a negative enum index."""
    rng = random.Random(3)
    pv = load("page_view")
    rec = sample("page_view", rng, 1_714_521_600_000)
    upper = dict(rec, guid=rec["guid"].upper())
    ts0 = 1_714_521_600_000
    schemas = {10: pv, 1: EVERYTHING}
    good = everything(rng, 1)
    bad_utf8 = body(pv, dict(rec, host="HOSTX")).replace(b"HOSTX", b"HO\xffTX")
    plain = dict(EVERYTHING, fields=[dict(f, type=["null", "long"]) if f["name"] == "micros" else f
                                     for f in EVERYTHING["fields"]])
    far = body(plain, dict(good, micros=400_000_000_000_000_000))  # year ~14700
    dup_map = {"type": "record", "name": "M", "fields": [{"name": "dm", "type": {"type": "map", "values": "int"}}]}
    dup = b"\x04" + b"\x02a\x02" + b"\x02a\x04" + b"\x00"  # two entries, both key "a"
    neg_enum = {"type": "record", "name": "E", "fields": [{"name": "e", "type": {
        "type": "enum", "name": "C", "symbols": ["A", "B"]}}]}
    return ({**schemas, 3: dup_map, 4: neg_enum},
            [(framed(10, body(pv, upper)), ts0), (framed(10, bad_utf8), ts0), (framed(1, far), ts0),
             (framed(3, dup), ts0), (framed(4, b"\x01"), ts0), (framed(10, body(pv, rec)), ts0)])


def raw_batch(items: list[tuple[bytes | None, int | None]], topic: str = "t", partition: int = 0, first: int = 0):
    """A batch with the ``format("ferry")`` columns."""
    import pyarrow as pa

    from ferry.loaders.record_columns import SCHEMA

    n = len(items)
    return pa.RecordBatch.from_arrays([
        pa.nulls(n, pa.binary()), pa.array([v for v, _ in items], pa.binary()), pa.array([topic] * n),
        pa.array([partition] * n, pa.int32()), pa.array(range(first, first + n), pa.int64()),
        pa.array([None if t is None else t * 1000 for _, t in items], pa.int64()).cast(SCHEMA.field("timestamp").type),
        pa.array([[]] * n, SCHEMA.field("headers").type)], schema=SCHEMA)
