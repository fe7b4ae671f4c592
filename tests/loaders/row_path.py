"""The load's decoder before issue 19 (one fastavro record at a time, columns rebuilt from lists), kept
only here as the reference the columnar path is compared with (tests/loaders/test_columnar.py).

Raw records -> typed warehouse rows (runs on the executors inside ``mapInArrow``).

Values are in the registry's wire format (magic byte 0, 4-byte big-endian schema id, Avro body) and are
decoded with their *writer* schema, then placed into the table's columns by field name, so no data of any
schema version is dropped. The `_audit` topic holds JSON audit events and gets fixed columns instead.

A record that cannot be decoded is not dropped silently: it becomes a row whose ``_error`` says why, and
the load job decides (fail the run, or skip and record the offsets).
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable, Iterator

MAGIC = 0
HOUR_US = 3_600_000_000


class HourLabels:
    """``dt``/``hr`` strings (UTC) of a timestamp in microseconds, cached per hour."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[str, str]] = {}

    def __call__(self, ts_us: int) -> tuple[str, str]:
        h = ts_us // HOUR_US
        got = self._cache.get(h)
        if got is None:
            t = dt.datetime.fromtimestamp(h * 3600, dt.UTC)
            got = self._cache[h] = (t.strftime("%Y-%m-%d"), t.strftime("%H"))
        return got


def schema_id_of(value: bytes | None) -> int | None:
    if value is None or len(value) < 5 or value[0] != MAGIC:
        return None
    return int.from_bytes(value[1:5], "big")


def _avro_record_decoder(schemas: dict[int, dict]) -> Callable[[bytes], dict]:
    import fastavro

    parsed: dict[int, object] = {}

    def decode(value: bytes) -> dict:
        if value is None:
            raise ValueError("null value (tombstone) has no Avro record")
        if len(value) < 5 or value[0] != MAGIC:
            raise ValueError(f"not in the registry wire format (magic byte {value[:1].hex() or 'missing'})")
        sid = int.from_bytes(value[1:5], "big")
        schema = parsed.get(sid)
        if schema is None:
            if sid not in schemas:
                raise ValueError(f"unknown schema id {sid}")
            schema = parsed[sid] = fastavro.parse_schema(schemas[sid])
        buf = io.BytesIO(value)
        buf.seek(5)
        rec = fastavro.schemaless_reader(buf, schema, None)
        if buf.tell() != len(value):
            raise ValueError(f"{len(value) - buf.tell()} bytes left over after decoding with schema id {sid} "
                             "(corrupt, or written with another schema)")
        if not isinstance(rec, dict):
            raise ValueError(f"schema id {sid} is not a record schema")
        return rec

    return decode


AUDIT_COLUMNS = ("guid", "topic", "tier", "bucket_start", "bucket_end", "count", "host", "datacenter",
                 "application", "time")


def _audit_decoder() -> Callable[[bytes], dict]:
    from ferry.client.audit.event import AuditEvent

    def decode(value: bytes) -> dict:
        if value is None:
            raise ValueError("null value is not an audit event")
        e = AuditEvent.from_json(value)
        return {c: getattr(e, c) for c in AUDIT_COLUMNS}

    return decode


def make_decoder(kind: str, data_columns: list[str], arrow_schema, schemas: dict[int, dict] | None = None,
                 text_columns: set[str] | frozenset = frozenset()) -> Callable[[Iterator], Iterator]:
    """The function given to ``mapInArrow``. ``arrow_schema`` is the output schema (the table's data
    columns, ``_topic, _partition, _offset, _event_time, dt, hr, _error``); ``kind`` is ``avro`` or ``audit``."""

    def run(batches: Iterator) -> Iterator:
        import pyarrow as pa

        decode_value = _audit_decoder() if kind == "audit" else _avro_record_decoder(schemas or {})
        labels = HourLabels()
        lower = {c.lower(): c for c in data_columns}
        for batch in batches:
            n = batch.num_rows
            values = batch.column("value").to_pylist()
            stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
            topics = batch.column("topic")
            partitions = batch.column("partition")
            offsets = batch.column("offset")
            cols: dict[str, list] = {c: [None] * n for c in data_columns}
            event_us: list = [None] * n
            dts: list = [None] * n
            hrs: list = [None] * n
            errors: list = [None] * n
            for i in range(n):
                try:
                    rec = decode_value(values[i])
                    if kind == "audit":
                        ts = rec["bucket_start"] * 1000
                    else:
                        ts = stamps[i]
                        if ts is None:
                            raise ValueError("record has no timestamp (event time)")
                    for name, v in rec.items():
                        col = cols.get(name)
                        if col is None:
                            target = lower.get(name.lower())
                            if target is None:
                                raise ValueError(f"field {name!r} has no column (schema registered during the run?)")
                            col = cols[target]
                        col[i] = v
                    event_us[i] = ts
                    dts[i], hrs[i] = labels(ts)
                except Exception as e:  # noqa: BLE001 - every failure becomes a visible error row
                    for c in data_columns:
                        cols[c][i] = None
                    errors[i] = f"{type(e).__name__}: {e}"[:500]
            arrays = []
            for name in text_columns:
                col = cols.get(name)
                if col is not None:
                    cols[name] = [v if v is None or type(v) is str else str(v) for v in col]
            for field in arrow_schema:
                name = field.name
                if name in cols:
                    arrays.append(pa.array(cols[name], field.type))
                elif name == "_topic":
                    arrays.append(topics.cast(field.type))
                elif name == "_partition":
                    arrays.append(partitions.cast(field.type))
                elif name == "_offset":
                    arrays.append(offsets.cast(field.type))
                elif name == "_event_time":
                    arrays.append(pa.array(event_us, pa.int64()).cast(field.type))
                elif name == "dt":
                    arrays.append(pa.array(dts, field.type))
                elif name == "hr":
                    arrays.append(pa.array(hrs, field.type))
                elif name == "_error":
                    arrays.append(pa.array(errors, field.type))
                else:
                    raise KeyError(f"decoder has no value for output column {name!r}")
            yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    return run
