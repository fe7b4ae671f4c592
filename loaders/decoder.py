"""Raw records -> typed warehouse rows with ferry's columns, for ``mapInArrow`` (the Spark-writer path).

The columnar decoding is value_decoder.ValueDecoder's; this module only lays its groups out as the rows
of one output schema (the table's columns, ``_topic, _partition, _offset, _event_time, dt, hr, _error``):
fields placed into the table's columns by name (case-insensitively, as Hive's columns are), columns a
schema lacks left null, and every record that cannot be loaded kept as a row whose ``_error`` says why
(the load job then fails the run or skips them, as configured).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from ferry.loaders.value_decoder import AUDIT_COLUMNS, Decoded, HourLabels, ValueDecoder  # noqa: F401

META = ("_topic", "_partition", "_offset", "_event_time")


def make_decoder(kind: str, data_columns: list[str], arrow_schema: pa.Schema, schemas: dict[int, dict] | None = None,
                 zookeeper: str | None = None) -> Callable[[Iterator], Iterator]:
    """The function given to ``mapInArrow``: batches with the ``format("ferry")`` columns in, batches of
    ``arrow_schema`` out. ``kind`` is ``avro`` (registry wire format) or ``audit`` (JSON audit events)."""

    def run(batches: Iterator) -> Iterator:
        decoder = ValueDecoder(kind, schemas, zookeeper)
        for batch in batches:
            yield rows_batch(decoder.decode(batch), batch, arrow_schema, decoder.labels)

    return run


def rows_batch(decoded: Decoded, batch: pa.RecordBatch, schema: pa.Schema, labels: HourLabels) -> pa.RecordBatch:
    """One output batch of ``schema`` from a decoded input batch: good rows of every group, then error rows."""
    names = set(schema.names)
    lower = {name.lower(): name for name in schema.names}
    errors = list(decoded.errors)
    pieces: list[pa.Table] = []
    for group in decoded.groups:
        table, hours = group.table, group.hours
        columns: dict[str, pa.ChunkedArray] = {}
        for name in table.column_names:
            target = name if name in names else lower.get(name.lower())
            if target is None:  # a field the table lacks: its schema was registered during the run
                reason = f"ValueError: field {name!r} has no column (schema registered during the run?)"
                errors += [(int(r), reason) for r in group.rows]
                break
            columns[target] = table.column(name)
        else:
            unique, inverse = np.unique(hours, return_inverse=True)
            pairs = [labels(int(h)) for h in unique]
            columns["dt"] = pa.array([p[0] for p in pairs], pa.string()).take(pa.array(inverse))
            columns["hr"] = pa.array([p[1] for p in pairs], pa.string()).take(pa.array(inverse))
            n = table.num_rows
            pieces.append(pa.Table.from_arrays(
                [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema],
                schema=schema))
    if errors:
        rows = pa.array([r for r, _ in errors], pa.int64())
        source = {"_topic": "topic", "_partition": "partition", "_offset": "offset"}
        pieces.append(pa.Table.from_arrays(
            [batch.column(source[f.name]).take(rows).cast(f.type) if f.name in source
             else pa.array([reason for _, reason in errors], f.type) if f.name == "_error"
             else pa.nulls(len(errors), f.type) for f in schema], schema=schema))
    out = pa.concat_tables(pieces).combine_chunks().to_batches() if pieces else []
    return out[0] if out else pa.RecordBatch.from_pylist([], schema=schema)
