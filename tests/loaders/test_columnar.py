"""The columnar load path gives what the row path gave: the same rows, every column, the same refusals.

The reference is the decoder loads used before issue 19 (tests/loaders/row_path.py: fastavro one record
at a time), run on the same raw batches; the columnar decoder runs natively and with its pure-Python
fallback (FERRY_NATIVE_DISABLE=batch_records,avro_columns). No Spark session: pyspark only names the column
types.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from ferry.loaders import native
from tests.loaders import avro_fixtures as fx
from tests.loaders import row_path
from tests.wire.native_parts import native_or_skip


def _out_schema(schemas: dict[int, dict]) -> tuple[list[str], pa.Schema, set[str]]:
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from ferry.loaders.avro_columns import avro_columns, merge_columns, table_struct, uuid_fields

    cols: list = []
    text: set[str] = set()
    for sid, schema in sorted(schemas.items()):
        cols = merge_columns(cols, avro_columns(schema, str(sid)), "t")
        text |= uuid_fields(schema)
    struct = table_struct(cols)
    struct = T.StructType(list(struct.fields) + [T.StructField("_error", T.StringType(), True)])
    return [n for n, _ in cols], to_arrow_schema(struct, timezone="UTC"), text


def _rows(batches, schema: pa.Schema) -> dict[int, dict]:
    table = pa.Table.from_batches(list(batches), schema=schema)
    table = pa.table({f.name: table.column(f.name).cast(pa.int64()) if pa.types.is_timestamp(f.type)
                      else table.column(f.name) for f in schema})  # to_pylist cannot hold years past 9999
    return {r["_offset"]: r for r in table.to_pylist()}


@pytest.fixture(params=["native", "fallback"])
def mode(request, monkeypatch):
    if request.param == "native":
        native_or_skip("batch_records")
        native_or_skip("avro_columns")
    monkeypatch.setenv("FERRY_NATIVE_DISABLE", "" if request.param == "native" else "batch_records,avro_columns")
    native._cache.clear()
    yield request.param
    native._cache.clear()


@pytest.mark.parametrize("fixture", [fx.values, fx.odd_values])
def test_columnar_decoder_matches_the_row_path(mode, fixture):
    from ferry.loaders.decoder import make_decoder

    schemas, items = fixture()
    names, schema, text = _out_schema(schemas)
    batches = [fx.raw_batch(items[i:i + 97], first=i) for i in range(0, len(items), 97)]
    want = _rows(row_path.make_decoder("avro", names, schema, schemas, text)(iter(batches)), schema)
    got = _rows(make_decoder("avro", names, schema, schemas)(iter(batches)), schema)
    assert sorted(got) == sorted(want) == list(range(len(items)))
    _assert_same(got, want)


def _assert_same(got: dict[int, dict], want: dict[int, dict]) -> None:
    """Good rows equal in every column; refused ones with the same reason (their other columns are not
    loaded, and the row path filled some of them halfway)."""
    bad = {o for o, r in want.items() if r["_error"]}
    assert bad, "the fixture has records a load refuses"
    for offset in sorted(want):
        w, g = want[offset], got[offset]
        if offset in bad:
            assert g["_error"] == w["_error"], (offset, g["_error"], w["_error"])
            assert (g["_topic"], g["_partition"]) == (w["_topic"], w["_partition"])
        else:
            assert g == w, offset


@pytest.mark.spark
@pytest.mark.slow
def test_both_writers_load_what_the_row_path_loads(spark, offline, tmp_path):
    """One fixture (every column type, the demo's events, refused records; lz4 batches) loaded end to end
    with the executors writing Parquet (arrow) and with Spark's writer; both tables must hold exactly the
    rows the row path makes of the same records, every column, and skip the same records."""
    import uuid

    from confluent_kafka import Producer
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from ferry.loaders import steps
    from ferry.loaders.avro_columns import uuid_fields
    from ferry.loaders.load_config import LoadConfig
    from ferry.schemas.registry import SchemaRegistry
    from tests.loaders.conftest import create_topic

    topic = create_topic(offline, partitions=2, prefix="col")
    with SchemaRegistry(offline.zk) as reg:
        reg.set_compatibility("NONE", topic)
        ids = {name: reg.register(topic, schema) for name, schema in fx.HIVE_SCHEMAS.items()}
    schemas, items = fx.values(n=120, ids=ids, hive=True)
    items = [(v, t) for v, t in items if t is not None]  # librdkafka stamps "no timestamp" with now
    p = Producer({"bootstrap.servers": offline.bootstrap, "compression.type": "lz4", "linger.ms": 5})
    for i, (value, ts) in enumerate(items):
        p.produce(topic, value=value, partition=i % 2, timestamp=ts)
    assert p.flush(30) == 0

    tables = {}
    for writer in ("arrow", "spark"):
        cfg = LoadConfig(zookeeper=offline.zk, topics=[topic], state_dir=str(tmp_path / writer),
                         warehouse=str(tmp_path / writer / "wh"), database=f"c_{writer}_{uuid.uuid4().hex[:6]}",
                         include_audit=False, skip_bad_records=True, parquet_writer=writer, max_per_split=150,
                         quiet=True)
        _, result = steps.load(cfg, spark)
        table = spark.table(f"{cfg.database}.{topic}")
        tables[writer] = (result.topics[0].bad, table.schema,
                          {(r._partition, r._offset): r.asDict(recursive=True) for r in table.collect()})

    schema = tables["arrow"][1]
    data_names = [f.name for f in schema.fields if f.name not in
                  ("_topic", "_partition", "_offset", "_event_time", "dt", "hr")]
    out = T.StructType(list(schema.fields) + [T.StructField("_error", T.StringType(), True)])
    text = set().union(*(uuid_fields(s) for s in schemas.values()))
    raw = (spark.read.format("ferry").option("kafka.bootstrap.servers", offline.bootstrap)
           .option("subscribe", topic).load())
    decoded = raw.mapInArrow(row_path.make_decoder("avro", data_names, to_arrow_schema(out, timezone="UTC"),
                                                   schemas, text), out)
    good = decoded.where(F.col("_error").isNull()).drop("_error")
    want = {(r._partition, r._offset): r.asDict(recursive=True) for r in good.collect()}
    bad = decoded.where(F.col("_error").isNotNull()).count()  # (not collected: one is past year 9999)
    assert bad >= 8 and len(want) + bad == len(items)
    for writer, (skipped, table_schema, got) in tables.items():
        assert table_schema == schema, writer
        assert skipped == bad, writer
        assert got.keys() == want.keys(), writer
        for key in sorted(want):
            assert got[key] == want[key], (writer, key)


def test_without_the_native_parts_the_load_warns_once_and_decodes_in_python(monkeypatch):
    """A machine that could not build the Cython modules still loads: one warning, the Python path."""
    import importlib
    import warnings

    real = importlib.import_module

    def no_native(name, *args, **kwargs):
        if name.startswith("ferry.loaders._"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(native, "_warned", False)
    monkeypatch.setattr(importlib, "import_module", no_native)
    monkeypatch.delenv("FERRY_REQUIRE_NATIVE", raising=False)  # this machine is the one without them
    native._cache.clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert native.module("_batch_records") is None and native.module("_avro_columns") is None
        assert [w.category for w in caught] == [native.NativeUnavailableWarning]
        assert "scripts/setup.sh" in str(caught[0].message)
        from ferry.loaders.decoder import make_decoder

        schemas, items = fx.values(n=20)
        names, schema, text = _out_schema(schemas)
        batch = fx.raw_batch(items)
        want = _rows(row_path.make_decoder("avro", names, schema, schemas, text)(iter([batch])), schema)
        _assert_same(_rows(make_decoder("avro", names, schema, schemas)(iter([batch])), schema), want)
    finally:
        native._cache.clear()
