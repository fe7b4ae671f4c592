"""Hive-metastore tables whose hour partitions are immutable versions.

Every (dt, hr) partition of a table points (its metastore LOCATION) at one directory
``<table root>/dt=D/hr=H/ferry_run=<run id>/`` holding the hour's complete content. A load never adds
files to a visible directory: it writes a new version of each hour it touches (the old rows, minus any
offsets it re-loads, plus its new rows) and later flips the partition's location. Readers therefore see
an hour either before or after a run, never half of it, and files of a run that fails are never
referenced. Filesystem work goes through Hadoop's FileSystem API, so the warehouse root may be a local
path or any Hadoop URI (hdfs://, s3a://).

Direct Parquet readers (DuckDB, pyarrow.dataset, pandas) must not scan ``<table root>``: it holds every version
(a superseded one is kept for an hour, a run's new ones before its commit) and a ``ferry_run`` directory level.
For a local warehouse each table therefore also has a reader tree, ``<root>/<db>.current/<table>/dt=D/hr=H``,
one symbolic link per hour to its current version, replaced atomically (rename) right after the metastore
flip: a Hive-partitioned scan of it sees every committed row once and nothing else (docs/analysts.md).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from urllib.parse import urlparse

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ferry.loaders.avro_columns import META_COLUMNS, PARTITION_COLUMNS, table_struct
from ferry.loaders.catalog import PartitionCatalog, PartitionVersion, sql_string
from ferry.loaders.naming import VERSION_COLUMN
from ferry.loaders.offsets import OffsetRange
from ferry.loaders.sql_current import ReaderTree

_META_NAMES = {n for n, _ in META_COLUMNS} | set(PARTITION_COLUMNS) | {VERSION_COLUMN}


class WarehouseError(RuntimeError):
    pass


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class Warehouse:
    def __init__(self, spark: SparkSession, root: str, database: str = "ferry") -> None:
        if not re.fullmatch(r"[A-Za-z_][0-9A-Za-z_]*", database):
            raise WarehouseError(f"database name {database!r} must be letters, digits and _")
        self.spark = spark
        self.root = self.qualify(root)
        self.database = database.lower()
        self._schemas: dict[str, T.StructType | None] = {}
        self.catalog = PartitionCatalog(spark, self.database)
        local = self.root.startswith("file:")
        # direct Parquet readers' tree (sql_current.py): symbolic links, so a local warehouse's only
        self.reader_tree = ReaderTree(urlparse(f"{self.root.rstrip('/')}/{self.database}.current").path
                                      if local else None, self.catalog)

    # ---------------------------------------------------------------- filesystem (Hadoop API)
    def _path(self, p: str):
        return self.spark._jvm.org.apache.hadoop.fs.Path(p)

    def _fs(self, p: str):
        return self._path(p).getFileSystem(self.spark._jsc.hadoopConfiguration())

    def qualify(self, p: str) -> str:
        """``/x`` -> ``file:/x``; URIs stay as they are (the metastore stores qualified locations)."""
        path = self._path(p)
        return path.getFileSystem(self.spark._jsc.hadoopConfiguration()).makeQualified(path).toString()

    def delete(self, p: str) -> bool:
        return bool(self._fs(p).delete(self._path(p), True))

    def exists(self, p: str) -> bool:
        return bool(self._fs(p).exists(self._path(p)))

    def glob(self, pattern: str) -> list[str]:
        statuses = self._fs(pattern).globStatus(self._path(pattern))
        return [s.getPath().toString() for s in (statuses or [])]

    # ---------------------------------------------------------------- tables
    def qualified(self, table: str) -> str:
        return f"{self.database}.{table}"

    def table_root(self, table: str) -> str:
        return f"{self.root.rstrip('/')}/{self.database}/{table}"

    def ensure_database(self) -> None:
        self.spark.sql(f"CREATE DATABASE IF NOT EXISTS {self.database} "
                       f"LOCATION {sql_string(self.root.rstrip('/') + '/' + self.database)}")

    def _schema(self, table: str) -> T.StructType | None:
        """The table's schema, or None when it does not exist; cached until this object changes the table
        (a run holds the state directory's lock: nobody else changes its tables meanwhile)."""
        if table not in self._schemas:
            try:
                self._schemas[table] = self.spark.table(self.qualified(table)).schema
            except AnalysisException:  # not found (with database "ferry", even "no such data source")
                if self.spark.catalog.tableExists(self.qualified(table)):
                    raise
                self._schemas[table] = None
        return self._schemas[table]

    def exists_table(self, table: str) -> bool:
        return self._schema(table) is not None

    def data_columns(self, table: str) -> list[tuple[str, T.DataType]] | None:
        """The table's columns other than ferry's, or None if the table does not exist."""
        schema = self._schema(table)
        if schema is None:
            return None
        return [(f.name, f.dataType) for f in schema.fields if f.name not in _META_NAMES]

    def ensure_table(self, table: str, data_columns: list[tuple[str, T.DataType]], with_meta: bool = True) -> bool:
        """Create the table, or add the columns it lacks (compatible evolution). True if it changed."""
        existing = self.data_columns(table)
        if existing is None:
            struct = table_struct(data_columns, with_meta)
            cols = ", ".join(f"{_ident(f.name)} {f.dataType.simpleString()}" for f in struct.fields
                             if f.name not in PARTITION_COLUMNS)
            self.spark.sql(
                f"CREATE TABLE IF NOT EXISTS {self.qualified(table)} ({cols}) "
                f"PARTITIONED BY (dt STRING, hr STRING) STORED AS PARQUET "
                f"LOCATION {sql_string(self.table_root(table))}")
            self._schemas.pop(table, None)
            return True
        have = {n.lower() for n, _ in existing}
        new = [(n, t) for n, t in data_columns if n.lower() not in have]
        if not new:
            return False
        cols = ", ".join(f"{_ident(n)} {t.simpleString()}" for n, t in new)
        self.spark.sql(f"ALTER TABLE {self.qualified(table)} ADD COLUMNS ({cols})")
        self.refresh(table)
        return True

    def table_schema(self, table: str) -> T.StructType:
        """Columns in table order, without the partition columns' special status (for writing)."""
        schema = self._schema(table)
        if schema is None:
            raise WarehouseError(f"table {self.qualified(table)} does not exist")
        return schema

    # ---------------------------------------------------------------- partitions
    def partition_location(self, table: str, dt: str, hr: str) -> str | None:
        """The partition's LOCATION, or None when (dt, hr) is not a partition (yet)."""
        return self.catalog.location(table, dt, hr)

    def partitions(self, table: str) -> list[tuple[str, str]]:
        if not self.exists_table(table):
            return []
        out = []
        for r in self.spark.sql(f"SHOW PARTITIONS {self.qualified(table)}").collect():
            spec = dict(kv.split("=", 1) for kv in r[0].split("/"))
            out.append((spec["dt"], spec["hr"]))
        return sorted(out)

    def set_partitions(self, versions: list[PartitionVersion]) -> None:
        """Point every (dt, hr) at its version (idempotent), then the reader tree's links follow."""
        self.catalog.set_locations(versions)
        self.reader_tree.publish(versions)

    def refresh(self, table: str) -> None:
        self._schemas.pop(table, None)
        self.spark.catalog.refreshTable(self.qualified(table))

    # ---------------------------------------------------------------- writing versions
    def write_versions(self, table: str, new_rows: DataFrame | None, hours: Iterable[tuple[str, str]],
                       replaced: list[OffsetRange], run_id: str, keep_old: str | None = None,
                       link_old: bool = False) -> list[PartitionVersion]:
        """Write, for every hour in ``hours``, a new version directory = old rows of that hour not in
        ``replaced`` (nor matching ``keep_old``'s negation) + ``new_rows`` of that hour. ``new_rows`` None:
        the executors already wrote the new rows into the version directories (split_load.py); only the
        old rows are added. ``link_old`` (the caller knows no old row is replaced): a local warehouse
        hard-links the old version's files instead of rewriting their rows (files never change).

        Nothing becomes visible here: the returned versions are flipped by :meth:`set_partition`.
        """
        hours = sorted(set(hours))
        if not hours:
            return []
        qt = self.qualified(table)
        schema = self.table_schema(table)
        cols = [f.name for f in schema.fields]
        previous = self.partition_locations(table, hours)
        content = new_rows.select(*cols) if new_rows is not None else None
        existing = [h for h in hours if previous[h] is not None]
        root = self.table_root(table)
        if existing and link_old and keep_old is None and self.root.startswith("file:"):
            for h in existing:
                _link_files(previous[h], self.qualify(f"{root}/dt={h[0]}/hr={h[1]}/{VERSION_COLUMN}={run_id}"))
            existing = []
        if existing:
            old = self.spark.table(qt).where(hours_filter(existing))
            drop = ranges_filter(replaced)
            if drop is not None:
                old = old.where(~drop)
            if keep_old is not None:
                old = old.where(F.expr(keep_old))
            old = old.select(*cols)
            content = old if content is None else old.unionByName(content)
        if content is not None:
            (content.repartition("dt", "hr")
                .withColumn(VERSION_COLUMN, F.lit(run_id))
                .write.mode("append").partitionBy("dt", "hr", VERSION_COLUMN)
                .option("compression", "snappy")
                .parquet(root))
        out = []
        for h in hours:
            loc = self.qualify(f"{root}/dt={h[0]}/hr={h[1]}/{VERSION_COLUMN}={run_id}")
            if not self.exists(loc):
                # every row of this hour was replaced and none came back: an explicitly empty version
                self._fs(loc).mkdirs(self._path(loc))
            out.append(PartitionVersion(table, h[0], h[1], loc, previous[h]))
        return out

    def partition_locations(self, table: str, hours: list[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
        if not hours or not self.exists_table(table):
            return {h: None for h in hours}
        return {h: self.partition_location(table, *h) for h in hours}

    def remove_versions(self, table: str, run_id: str) -> int:
        """Delete the version directories a failed run wrote for ``table`` (never referenced by anyone)."""
        paths = self.orphan_versions(table, run_id)
        for path in paths:
            self.delete(path)
        return len(paths)

    def orphan_versions(self, table: str, run_id: str) -> list[str]:
        return self.run_versions(self.table_root(table), run_id)

    def run_versions(self, table_root: str, run_id: str) -> list[str]:
        """The version directories ``run_id`` wrote under a table's root directory."""
        return self.glob(f"{table_root}/dt=*/hr=*/{VERSION_COLUMN}={run_id}")


def _link_files(source: str, target: str) -> None:
    """Hard-link the data files of directory ``source`` into ``target`` (local ``file:`` URIs)."""
    src, dst = urlparse(source).path, urlparse(target).path
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name.startswith((".", "_")) or not os.path.isfile(os.path.join(src, name)):
            continue  # checksums, markers
        source_file, target_file = os.path.join(src, name), os.path.join(dst, name)
        try:
            os.link(source_file, target_file)
        except FileExistsError:
            if not os.path.samefile(source_file, target_file):  # never drop old rows silently
                raise WarehouseError(f"{target_file} exists: cannot carry {source_file} into the new version"
                                     ) from None
        except OSError:  # another filesystem, or no hard links: copy
            shutil.copy2(source_file, target_file)


def hours_filter(hours: Iterable[tuple[str, str]]) -> Column:
    cond = None
    for d, h in sorted(set(hours)):
        c = (F.col("dt") == d) & (F.col("hr") == h)
        cond = c if cond is None else cond | c
    return cond if cond is not None else F.lit(False)


def ranges_filter(ranges: Iterable[OffsetRange]) -> Column | None:
    """Rows whose (_topic, _partition, _offset) lies in one of ``ranges`` (None when there are none)."""
    cond = None
    for r in ranges:
        if r.size == 0:
            continue
        c = ((F.col("_topic") == r.topic) & (F.col("_partition") == r.partition)
             & (F.col("_offset") >= r.start) & (F.col("_offset") < r.end))
        cond = c if cond is None else cond | c
    return cond
