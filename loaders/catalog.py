"""The metastore's partitions of one database: where each (dt, hr) of a table points, and the flip.

A load never changes files a partition points at; it writes a new version directory and then points the
partition at it (:class:`PartitionVersion`). The metastore is reached through Spark's external catalog
directly: Spark's ALTER TABLE statements cost ~0.5 s apiece here (parsing, analysis, statistics), a
catalog call a few milliseconds. SQL remains the fallback where this Spark's catalog classes differ.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession


def sql_string(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class PartitionVersion:
    table: str  # db.table
    dt: str
    hr: str
    location: str  # the new version directory
    previous: str | None  # the location it replaces (garbage once the flip is done)

    def to_dict(self) -> dict:
        return {"table": self.table, "dt": self.dt, "hr": self.hr, "location": self.location,
                "previous": self.previous}

    @classmethod
    def from_dict(cls, d: dict) -> PartitionVersion:
        return cls(d["table"], d["dt"], d["hr"], d["location"], d.get("previous"))


class PartitionCatalog:
    """The partitions of the tables of ``database`` in the session's Hive metastore."""

    def __init__(self, spark: SparkSession, database: str) -> None:
        self.spark = spark
        self.database = database

    def _external(self):
        return self.spark._jsparkSession.sessionState().catalog().externalCatalog()

    def _spec(self, dt: str, hr: str):
        return self.spark._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap({"dt": dt, "hr": hr})

    def location(self, table: str, dt: str, hr: str) -> str | None:
        """The partition's LOCATION, or None when (dt, hr) is not a partition (yet). ~10x cheaper than a
        DESCRIBE statement, and a run asks once per hour it touches."""
        found = self._external().getPartitionOption(self.database, table.lower(), self._spec(dt, hr))
        return found.get().location().toString() if found.isDefined() else None

    def locations(self, table: str) -> dict[tuple[str, str], str]:
        """(dt, hr) -> location of every partition of ``table`` (one call)."""
        out = {}
        parts = self._external().listPartitions(self.database, table.lower(), self.spark._jvm.scala.Option.empty())
        it = parts.iterator()
        while it.hasNext():
            p = it.next()
            spec = p.spec()
            out[(spec.apply("dt"), spec.apply("hr"))] = p.location().toString()
        return out

    def set_locations(self, versions: list[PartitionVersion]) -> None:
        """Point every (dt, hr) at its version (idempotent): per table one catalog call for the new
        partitions and one for the moved ones; SQL if this Spark's catalog classes differ."""
        by_table: dict[str, list[PartitionVersion]] = {}
        for v in versions:
            by_table.setdefault(v.table.split(".")[-1].lower(), []).append(v)
        for table, vs in by_table.items():
            try:
                self._set_catalog(table, vs)
            except Py4JError:
                for v in vs:
                    self._set_sql(table, v)

    def _set_catalog(self, table: str, versions: list[PartitionVersion]) -> None:
        jvm = self.spark._jvm
        external = self._external()
        to_map, to_seq = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap, jvm.PythonUtils.toSeq

        def located(storage, location: str):
            """A copy of a CatalogStorageFormat (a case class: fields in order, locationUri first)."""
            if storage.productElementName(0) != "locationUri":
                raise Py4JError("CatalogStorageFormat does not start with locationUri")
            fields = [storage.productElement(i) for i in range(storage.productArity())]
            fields[0] = jvm.scala.Some(jvm.java.net.URI(location))
            return storage.copy(*fields)

        table_storage = external.getTable(self.database, table).storage()
        new, moved = [], []
        for v in versions:
            spec = to_map({"dt": v.dt, "hr": v.hr})
            found = external.getPartitionOption(self.database, table, spec)
            if not found.isDefined():
                new.append(jvm.org.apache.spark.sql.catalyst.catalog.CatalogTablePartition(
                    spec, located(table_storage, v.location), to_map({}), int(time.time() * 1000), -1,
                    jvm.scala.Option.empty()))
            elif found.get().location().toString().rstrip("/") != v.location.rstrip("/"):
                p = found.get()
                moved.append(p.copy(p.spec(), located(p.storage(), v.location), p.parameters(), p.createTime(),
                                    p.lastAccessTime(), p.stats()))
        if new:
            external.createPartitions(self.database, table, to_seq(new), True)
        if moved:
            external.alterPartitions(self.database, table, to_seq(moved))

    def _set_sql(self, table: str, v: PartitionVersion) -> None:
        qt = f"{self.database}.{table}"
        spec = f"PARTITION (dt={sql_string(v.dt)}, hr={sql_string(v.hr)})"
        current = self.location(table, v.dt, v.hr)
        if current is None:
            self.spark.sql(f"ALTER TABLE {qt} ADD IF NOT EXISTS {spec} LOCATION {sql_string(v.location)}")
        elif current.rstrip("/") != v.location.rstrip("/"):
            self.spark.sql(f"ALTER TABLE {qt} {spec} SET LOCATION {sql_string(v.location)}")
