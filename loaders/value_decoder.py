"""Values of raw record batches -> typed warehouse columns, a schema id at a time (runs on the executors).

Values are in the registry's wire format (magic byte 0, 4-byte big-endian schema id, Avro body). A batch's
rows are grouped by schema id (numpy over the value buffer: no Python object per record) and each group is
decoded with its *writer* schema by the native columnar decoder (_avro_columns + avro_program) into one
Arrow array per field, typed as the warehouse column. A group the native decoder has any doubt about (a
body that does not decode, invalid UTF-8, a timestamp datetime cannot hold, a schema it does not handle)
is decoded the careful way instead: fastavro, one record at a time, exactly as loads always did, so the
same records become error rows for the same reasons. The `_audit` topic holds JSON audit events and is
decoded per record (it is small).

Every group comes with ferry's columns (_topic, _partition, _offset, _event_time) and the hour of each row;
rows that cannot be loaded (not the wire format, unknown schema id, corrupt body, no timestamp) are
reported as ``(row, reason)`` instead.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable
from dataclasses import dataclass, field

import fastavro
import numpy as np
import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from ferry.client.audit.event import AuditEvent
from ferry.loaders import native
from ferry.loaders.avro_columns import SchemaMappingError, avro_columns, uuid_fields
from ferry.loaders.avro_program import Doubt, Program, UnsupportedSchema, arrays, compile_schema
from ferry.schemas.errors import UnknownSchemaError
from ferry.schemas.registry import SchemaRegistry

MAGIC = 0
HOUR_US = 3_600_000_000
EVENT_TIME = pa.timestamp("us", tz="UTC")
AUDIT_COLUMNS = ("guid", "topic", "tier", "bucket_start", "bucket_end", "count", "host", "datacenter",
                 "application", "time")
AUDIT_TEXT = {"guid", "topic", "tier", "host", "datacenter", "application"}


class HourLabels:
    """``dt``/``hr`` strings (UTC) of an hour number (µs // HOUR_US), cached; raises as datetime does."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[str, str]] = {}

    def __call__(self, hour: int) -> tuple[str, str]:
        got = self._cache.get(hour)
        if got is None:
            t = dt.datetime.fromtimestamp(hour * 3600, dt.UTC)
            got = self._cache[hour] = (t.strftime("%Y-%m-%d"), t.strftime("%H"))
        return got


@dataclass
class SchemaGroup:
    """Decoded rows of one schema id: ``table`` = the schema's fields + ferry's columns; ``hours`` per row."""

    schema_id: int | None
    table: pa.Table
    hours: np.ndarray
    rows: np.ndarray  # of the input batch


@dataclass
class Decoded:
    groups: list[SchemaGroup] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)  # (row of the input batch, reason)


@dataclass
class _Schema:
    fields: list[str]
    types: list[pa.DataType]
    text: set[str]
    parsed: object
    program: Program | None  # None when the native decoder cannot take it
    native: object | None


def _reason(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:500]


class ValueDecoder:
    """``decode(batch)`` for batches with the ``format("ferry")`` columns. ``schemas``: writer schemas by id
    known in advance; others are looked up in the registry at ``zookeeper`` (once per id and process)."""

    def __init__(self, kind: str = "avro", schemas: dict[int, dict] | None = None, zookeeper: str | None = None,
                 lookup: Callable[[int], dict | None] | None = None) -> None:
        self.kind = kind
        self.schemas = dict(schemas or {})
        self.zookeeper = zookeeper
        self._lookup = lookup
        self._prepared: dict[int, _Schema | str] = {}
        self.labels = HourLabels()

    # ---------------------------------------------------------------- schemas
    def _schema(self, sid: int) -> _Schema | str:
        """The prepared writer schema of ``sid``, or the reason its records cannot be loaded."""
        got = self._prepared.get(sid)
        if got is None:
            got = self._prepared[sid] = self._prepare(sid)
        return got

    def _prepare(self, sid: int) -> _Schema | str:
        schema = self.schemas.get(sid)
        if schema is None:
            schema = self._registry_lookup(sid)
            if schema is None:
                return f"ValueError: unknown schema id {sid}"
            self.schemas[sid] = schema
        try:
            cols = avro_columns(schema, f"schema id {sid}")
        except SchemaMappingError as e:
            return _reason(e)
        struct = T.StructType([T.StructField(c.name, c.dtype, True) for c in cols])
        types = [f.type for f in to_arrow_schema(struct, timezone="UTC")]
        program = decoder = None
        mod = native.module("_avro_columns")
        if mod is not None:
            try:
                program = compile_schema(schema)
                decoder = mod.AvroColumns(*program.native_args())
            except UnsupportedSchema:
                program = None
        return _Schema([c.name for c in cols], types, uuid_fields(schema), fastavro.parse_schema(schema),
                       program, decoder)

    def _registry_lookup(self, sid: int) -> dict | None:
        if self._lookup is not None:
            return self._lookup(sid)
        if not self.zookeeper:
            return None
        with SchemaRegistry(self.zookeeper, read_only=True) as registry:
            try:
                return registry.get(sid)
            except UnknownSchemaError:
                return None

    # ---------------------------------------------------------------- decoding
    def decode(self, batch: pa.RecordBatch) -> Decoded:
        out = Decoded()
        if not batch.num_rows:
            return out
        if self.kind == "audit":
            self._decode_audit(batch, out)
        else:
            self._decode_avro(batch, out)
        return out

    def _decode_avro(self, batch: pa.RecordBatch, out: Decoded) -> None:
        values = batch.column("value")
        n = len(values)
        offsets = np.frombuffer(values.buffers()[1], np.int32, n + 1, values.offset * 4)
        data = values.buffers()[2]
        data = np.frombuffer(data, np.uint8) if data is not None and data.size else np.zeros(1, np.uint8)
        valid = (np.ones(n, bool) if not values.null_count
                 else values.is_valid().to_numpy(zero_copy_only=False))
        starts, lengths = offsets[:-1], offsets[1:] - offsets[:-1]
        framed = valid & (lengths >= 5)
        framed[framed] = data[starts[framed]] == MAGIC
        sids = np.full(n, -1, np.int64)
        at = starts[framed].astype(np.int64)
        head = data[at[:, None] + np.arange(1, 5)].astype(np.int64)
        sids[framed] = (head[:, 0] << 24) | (head[:, 1] << 16) | (head[:, 2] << 8) | head[:, 3]
        for r in np.flatnonzero(~framed):
            if not valid[r]:
                out.errors.append((int(r), "ValueError: null value (tombstone) has no Avro record"))
            else:
                first = bytes(data[starts[r]:starts[r] + 1]) if lengths[r] else b""
                out.errors.append((int(r), "ValueError: not in the registry wire format "
                                           f"(magic byte {first.hex() or 'missing'})"))
        stamps = batch.column("timestamp").cast(pa.int64()).fill_null(0).to_numpy()
        ts_valid = batch.column("timestamp").is_valid().to_numpy(zero_copy_only=False)
        for sid in np.unique(sids[framed]):
            rows = np.flatnonzero(sids == sid)
            prepared = self._schema(int(sid))
            if isinstance(prepared, str):
                out.errors += [(int(r), prepared) for r in rows]
                continue
            columns, good, errors = self._decode_group(prepared, values, data, offsets, rows)
            out.errors += errors
            self._add_group(out, int(sid), prepared.fields, columns, batch, good, stamps, ts_valid)

    def _decode_group(self, s: _Schema, values: pa.Array, data: np.ndarray, offsets: np.ndarray,
                      rows: np.ndarray) -> tuple[list[pa.Array], np.ndarray, list[tuple[int, str]]]:
        """(one array per field, the rows they hold, errors) of one schema id's rows."""
        if s.native is not None:
            failures = s.native.decode(data, offsets, rows, 5)
            taken = s.native.take()
            if not failures:
                try:
                    return arrays(s.program, taken, s.types), rows, []
                except Doubt:
                    pass
        return self._careful(s, values, rows)

    def _careful(self, s: _Schema, values: pa.Array, rows: np.ndarray):
        """fastavro, one record at a time: what loads always did (the judge of undecodable records)."""
        cols: dict[str, list] = {name: [] for name in s.fields}
        lower = {name.lower(): name for name in s.fields}
        good, errors = [], []
        for r in rows:
            value = values[int(r)].as_py()
            try:
                buf = io.BytesIO(value)
                buf.seek(5)
                rec = fastavro.schemaless_reader(buf, s.parsed, None)
                if buf.tell() != len(value):
                    raise ValueError(f"{len(value) - buf.tell()} bytes left over after decoding with schema id "
                                     f"{int.from_bytes(value[1:5], 'big')} (corrupt, or written with another schema)")
                if not isinstance(rec, dict):
                    raise ValueError("the schema is not a record schema")
            except Exception as e:  # noqa: BLE001 - every failure becomes a visible error row
                errors.append((int(r), _reason(e)))
                continue
            good.append(r)
            for name in s.fields:
                cols[name].append(None)
            for name, v in rec.items():
                col = cols[name] if name in cols else cols[lower[name.lower()]]
                col[-1] = str(v) if v is not None and name in s.text and type(v) is not str else v
        arrays_ = [pa.array(cols[name], t) for name, t in zip(s.fields, s.types, strict=True)]
        return arrays_, np.asarray(good, np.int64), errors

    def _decode_audit(self, batch: pa.RecordBatch, out: Decoded) -> None:
        cols: dict[str, list] = {c: [] for c in AUDIT_COLUMNS}
        good, stamps = [], []
        for r, value in enumerate(batch.column("value").to_pylist()):
            try:
                if value is None:
                    raise ValueError("null value is not an audit event")
                e = AuditEvent.from_json(value)
                row = {c: getattr(e, c) for c in AUDIT_COLUMNS}
            except Exception as e:  # noqa: BLE001 - every failure becomes a visible error row
                out.errors.append((r, _reason(e)))
                continue
            good.append(r)
            stamps.append(row["bucket_start"] * 1000)
            for c in AUDIT_COLUMNS:
                cols[c].append(row[c])
        columns = [pa.array(cols[c], pa.string() if c in AUDIT_TEXT else pa.int64()) for c in AUDIT_COLUMNS]
        rows = np.asarray(good, np.int64)
        self._add_group(out, None, list(AUDIT_COLUMNS), columns, batch, rows,
                        np.asarray(stamps, np.int64), np.ones(len(rows), bool), by_row=False)

    def _add_group(self, out: Decoded, sid: int | None, names: list[str], columns: list[pa.Array],
                   batch: pa.RecordBatch, rows: np.ndarray, stamps: np.ndarray, ts_valid: np.ndarray,
                   by_row: bool = True) -> None:
        """Add ferry's columns and hours to decoded rows; rows without a usable event time become errors."""
        if not len(rows):
            return
        us = stamps[rows] if by_row else stamps
        ok = ts_valid[rows] if by_row else ts_valid
        hours = np.where(ok, us // HOUR_US, 0)
        for hour in np.unique(hours[ok]):
            try:
                self.labels(int(hour))
            except (ValueError, OverflowError, OSError) as e:
                ok &= hours != hour
                out.errors += [(int(rows[i]), _reason(e)) for i in np.flatnonzero(hours == hour)]
        for i in np.flatnonzero(~(ts_valid[rows] if by_row else ts_valid)):
            out.errors.append((int(rows[i]), "ValueError: record has no timestamp (event time)"))
        take = pa.array(rows)
        table = pa.Table.from_arrays(
            columns + [batch.column("topic").take(take), batch.column("partition").take(take),
                       batch.column("offset").take(take), pa.array(us, pa.int64()).cast(EVENT_TIME)],
            names=names + ["_topic", "_partition", "_offset", "_event_time"])
        if not ok.all():
            table, hours, rows = table.filter(pa.array(ok)), hours[ok], rows[ok]
        out.groups.append(SchemaGroup(sid, table, hours, rows))
