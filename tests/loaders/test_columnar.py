"""The columnar load path gives what the row path gave: the same rows, every column, the same refusals.

The reference is the decoder loads used before issue 19 (tests/loaders/row_path.py: fastavro one record
at a time), run on the same raw batches; the columnar decoder runs natively and with its pure-Python
fallback (FERRY_LOAD_NATIVE=0). No Spark session: pyspark only names the column types.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from ferry.loaders import native
from tests.loaders import avro_fixtures as fx
from tests.loaders import row_path


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
    if request.param == "native" and not native.available():
        pytest.skip("native modules not built (scripts/build_native.py)")
    monkeypatch.setenv("FERRY_LOAD_NATIVE", "1" if request.param == "native" else "0")
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
    bad = {o for o, r in want.items() if r["_error"]}
    assert bad, "the fixture has records a load refuses"
    for offset in sorted(want):
        w, g = want[offset], got[offset]
        if offset in bad:
            assert g["_error"] == w["_error"], (offset, g["_error"], w["_error"])
            assert (g["_topic"], g["_partition"]) == (w["_topic"], w["_partition"])
        else:
            assert g == w, offset
