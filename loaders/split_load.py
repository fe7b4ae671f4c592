"""One split of a load on an executor: raw record batches -> decoded columns -> Parquet files per hour.

Why here and not in Spark's writer: Spark's Parquet writer takes rows (every Arrow batch from Python is
turned into JVM rows, then written row by row), which costs several µs a row on these machines; pyarrow
writes the same columns at ~0.3 µs a row. So with ``parquet_writer=arrow`` (the default for a local
warehouse) rows never enter the JVM: each split writes its rows into the hour partitions' new version
directories itself, ``<table root>/dt=D/hr=H/ferry_run=<run id>/part-<split>-<n>-<run id>.parquet``, and hands
Spark only a few rows of statistics (``STATS_SCHEMA``): rows per (hour, 10-minute bucket, schema id), the
number of records it could not load, the first of them (partition, offset, reason), and the CPU seconds
it spent per stage (fetch, parse, decode, write, and "wait": wall time beyond them; "split_wall": the
whole split; ``kind="time"``, µs in ``rows``, the stage in ``error``), and the split's own rows (``kind="split"``,
its index in ``partition``: which executor wrote how many rows, executor_report.py). One Spark job loads all topics of a run (a job costs ~1 s here).

Files are written under a hidden name and renamed when complete; a retried task writes the same names
again (same ranges, same rows). Nothing here is visible: the job commits the run, then points the
metastore at the version directories. A file holds the columns of one schema id's fields (plus ferry's);
Spark reads a table's files by column name, so columns a file lacks read as null.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs

from ferry.client.audit.bucket import BUCKET_MS  # the audit's 10-minute buckets
from ferry.loaders.naming import VERSION_COLUMN
from ferry.loaders.value_decoder import ValueDecoder

STATS_SCHEMA = ("topic string, kind string, dt string, hr string, bucket long, schema_id int, rows long, "
                "partition int, offset long, error string")
ROW_GROUP_ROWS = 131_072  # rows buffered per file before a row group is written
SAMPLES = 5  # bad records reported per split (the job names the first ones of the run)


class SharedStorageError(RuntimeError):
    """The driver does not see the rows the executors wrote: the warehouse is not one storage for all."""


def rows_written(root: str, run_id: str, hours: list[tuple[str, str]]) -> int:
    """Rows in the footers of the files ``run_id``'s splits wrote under a table's ``root``, as the driver sees
    them: on a cluster, what a worker wrote to a directory that is not the shared mount is missing here."""
    where, base = filesystem(root)
    total = 0
    for d, h in hours:
        selector = fs.FileSelector(f"{base.rstrip('/')}/dt={d}/hr={h}/{VERSION_COLUMN}={run_id}", allow_not_found=True)
        for info in where.get_file_info(selector):
            if info.base_name.startswith("part-") and info.base_name.endswith(f"-{run_id}.parquet"):
                total += pq.read_metadata(info.path, filesystem=where).num_rows
    return total


@dataclass
class TopicTarget:
    """Where and how one topic's splits load: its table's root directory (URI), ``avro`` or ``audit``
    values, and the writer schemas the driver knows (others are looked up in the registry)."""

    root: str
    kind: str = "avro"
    schemas: dict[int, dict] = field(default_factory=dict)


@dataclass
class SplitTarget:
    """What the executors of a run need (the ``ferry.load`` option, JSON): the run, the registry, and a
    TopicTarget per topic (one Spark job loads every topic of a run)."""

    run_id: str
    topics: dict[str, TopicTarget]
    zookeeper: str | None = None  # where executors look up schema ids the driver did not pass

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SplitTarget:
        d = json.loads(text)
        topics = {t: TopicTarget(v["root"], v.get("kind", "avro"), {int(k): s for k, s in v.get("schemas", {}).items()})
                  for t, v in d["topics"].items()}
        return cls(d["run_id"], topics, d.get("zookeeper"))


def filesystem(root: str) -> tuple[fs.FileSystem, str]:
    """(pyarrow filesystem, path) of a warehouse URI; ``file:`` and plain paths are local."""
    if root.startswith("file:") or "://" not in root:
        return fs.LocalFileSystem(), urlparse(root).path if root.startswith("file:") else root
    return fs.FileSystem.from_uri(root.replace("s3a://", "s3://", 1))


class HourFiles:
    """Parquet files of one split, one per (hour, file schema), row groups of up to ROW_GROUP_ROWS rows."""

    def __init__(self, root: str, run_id: str, split: int) -> None:
        self.fs, self.root = filesystem(root)
        self.run_id, self.split = run_id, split
        self._open: dict[tuple[str, str, pa.Schema], list] = {}  # -> [writer, tmp path, path, pending, rows]
        self._seq = 0
        self.files: list[str] = []

    def add(self, dt: str, hr: str, table: pa.Table) -> None:
        key = (dt, hr, table.schema)
        entry = self._open.get(key)
        if entry is None:
            directory = f"{self.root.rstrip('/')}/dt={dt}/hr={hr}/{VERSION_COLUMN}={self.run_id}"
            self.fs.create_dir(directory, recursive=True)
            # the run id in the name: a later version of the hour hard-links this file next to its own
            name = f"part-{self.split:05d}-{self._seq:03d}-{self.run_id}.parquet"
            self._seq += 1
            tmp = f"{directory}/.{name}.{uuid.uuid4().hex[:8]}.inprogress"
            writer = pq.ParquetWriter(tmp, table.schema, filesystem=self.fs, compression="snappy")
            entry = self._open[key] = [writer, tmp, f"{directory}/{name}", [], 0]
        entry[3].append(table)
        entry[4] += table.num_rows
        if entry[4] >= ROW_GROUP_ROWS:
            self._flush(entry)

    @staticmethod
    def _flush(entry: list) -> None:
        if entry[3]:
            entry[0].write_table(pa.concat_tables(entry[3]), row_group_size=1 << 30)
            entry[3], entry[4] = [], 0

    def close(self) -> None:
        for entry in self._open.values():
            self._flush(entry)
            entry[0].close()
            self.fs.move(entry[1], entry[2])
            self.files.append(entry[2])
        self._open.clear()

    def abort(self) -> None:
        for entry in self._open.values():
            try:
                entry[0].close()
                self.fs.delete_file(entry[1])
            except Exception:  # noqa: BLE001 - best effort: the failed run's directories are removed anyway
                pass
        self._open.clear()


def load_split(batches: Iterator[pa.RecordBatch], split_index: int, topic: str, target: SplitTarget,
               timing: dict[str, float] | None = None) -> Iterator[pa.RecordBatch]:
    """Decode and write one split's records; yields one RecordBatch of STATS_SCHEMA rows at the end.
    ``timing``: the reader's own stage times (``parse``, CPU seconds), reported with this function's."""
    mine = target.topics[topic]
    decoder = ValueDecoder(mine.kind, mine.schemas, target.zookeeper)
    files = HourFiles(mine.root, target.run_id, split_index)
    counts: dict[tuple[int, int], int] = defaultdict(int)  # (bucket ms, schema id) -> rows
    bad = 0
    samples: list[tuple[int, int, str]] = []
    spent = {"read": 0.0, "decode": 0.0, "write": 0.0}
    clock = time.thread_time  # CPU: the machine may be shared, wall time says little per stage
    wall = time.perf_counter()
    try:
        batches = iter(batches)
        while True:
            t0 = clock()
            batch = next(batches, None)
            t1 = clock()
            spent["read"] += t1 - t0
            if batch is None:
                break
            decoded = decoder.decode(batch)
            t2 = clock()
            spent["decode"] += t2 - t1
            for group in decoded.groups:
                _write_group(files, decoder, group, counts)
            spent["write"] += clock() - t2
            if decoded.errors:
                bad += len(decoded.errors)
                if len(samples) < SAMPLES:
                    partitions, offsets = batch.column("partition"), batch.column("offset")
                    samples += [(partitions[r].as_py(), offsets[r].as_py(), reason)
                                for r, reason in sorted(decoded.errors)[:SAMPLES - len(samples)]]
        t0 = clock()
        files.close()
        spent["write"] += clock() - t0
    except BaseException:
        files.abort()
        raise
    parse = (timing or {}).get("parse", 0.0)
    stages = {"fetch": spent["read"] - parse, "parse": parse, "decode": spent["decode"], "write": spent["write"]}
    elapsed = time.perf_counter() - wall
    stages["wait"] = max(0.0, elapsed - sum(stages.values()))  # the broker, or a busy CPU
    stages["split_wall"] = elapsed
    yield _stats(topic, decoder, counts, bad, samples, stages, split_index)


def _write_group(files: HourFiles, decoder: ValueDecoder, group, counts: dict) -> None:
    table, hours = group.table, group.hours
    ms = table.column("_event_time").cast(pa.int64()).to_numpy() // 1000
    buckets, n = np.unique(ms // BUCKET_MS * BUCKET_MS, return_counts=True)
    sid = -1 if group.schema_id is None else group.schema_id
    for b, c in zip(buckets.tolist(), n.tolist(), strict=True):
        counts[(b, sid)] += c
    first, last = int(hours.min()), int(hours.max())
    if first == last:
        files.add(*decoder.labels(first), table)
        return
    order = np.argsort(hours, kind="stable")
    sorted_hours = hours[order]
    cuts = np.flatnonzero(np.diff(sorted_hours)) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(order)], strict=True):
        files.add(*decoder.labels(int(sorted_hours[lo])), table.take(pa.array(order[lo:hi])))


def _stats(topic: str, decoder: ValueDecoder, counts: dict, bad: int, samples: list, stages: dict[str, float],
           split_index: int) -> pa.RecordBatch:
    rows: list[dict] = [{"kind": "time", "error": k, "rows": round(v * 1e6)} for k, v in stages.items()]
    rows.append({"kind": "split", "partition": split_index, "rows": sum(counts.values())})
    for (bucket, sid), n in sorted(counts.items()):
        d, h = decoder.labels(bucket // 3_600_000)
        rows.append({"kind": "rows", "dt": d, "hr": h, "bucket": bucket, "schema_id": sid, "rows": n})
    if bad:
        rows.append({"kind": "bad", "rows": bad})
    rows += [{"kind": "sample", "partition": p, "offset": o, "error": e} for p, o, e in samples]
    for row in rows:
        row["topic"] = topic
    schema = pa.schema([("topic", pa.string()), ("kind", pa.string()), ("dt", pa.string()), ("hr", pa.string()), ("bucket", pa.int64()),
                        ("schema_id", pa.int32()), ("rows", pa.int64()), ("partition", pa.int32()),
                        ("offset", pa.int64()), ("error", pa.string())])
    return pa.RecordBatch.from_pylist(rows, schema=schema)
