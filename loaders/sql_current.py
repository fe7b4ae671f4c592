"""The reader tree: what direct Parquet readers (DuckDB, pyarrow.dataset, pandas) scan to see each committed row once.

A table's own directory holds every version of its hours (``dt=D/hr=H/ferry_run=<run>/``: the current one, a
superseded one kept an hour for readers still on it, a running load's new ones) and so double-counts when
scanned. A local warehouse also keeps ``<root>/<db>.current/<table>/dt=D/hr=H``, one symbolic link per hour to
the version the metastore points at, replaced by rename right after the metastore's flip (atomic per hour). A
Hive-partitioned scan of that tree sees the committed rows exactly once, with ``dt`` and ``hr`` as columns.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from ferry.loaders.warehouse import PartitionVersion, Warehouse


def publish_current(wh: Warehouse, versions: list[PartitionVersion]) -> None:
    """Point each hour's link at its version (idempotent); a table met for the first time gets links for all
    its partitions (warehouses from before the reader tree)."""
    if not wh.root.startswith("file:"):
        return  # symbolic links are a local filesystem's; elsewhere readers go through the metastore
    done: set[str] = set()
    for v in versions:
        table = v.table.split(".")[-1].lower()
        base = urlparse(wh.current_root(table)).path
        if table not in done and not os.path.isdir(base):
            done.add(table)
            for (d, h), location in partition_locations(wh, table).items():
                link_hour(base, d, h, urlparse(location).path)
        link_hour(base, v.dt, v.hr, urlparse(v.location).path)


def partition_locations(wh: Warehouse, table: str) -> dict[tuple[str, str], str]:
    """(dt, hr) -> location of every partition, from the metastore (one call)."""
    jvm = wh.spark._jvm
    external = wh.spark._jsparkSession.sessionState().catalog().externalCatalog()
    out = {}
    parts = external.listPartitions(wh.database, table, jvm.scala.Option.empty())
    it = parts.iterator()
    while it.hasNext():
        p = it.next()
        spec = p.spec()
        out[(spec.apply("dt"), spec.apply("hr"))] = p.location().toString()
    return out


def link_hour(base: str, dt: str, hr: str, target: str) -> None:
    """``base/dt=D/hr=H`` -> ``target`` (relative, so the tree can be mounted elsewhere), swapped by rename."""
    parent = os.path.join(base, f"dt={dt}")
    os.makedirs(parent, exist_ok=True)
    link = os.path.join(parent, f"hr={hr}")
    relative = os.path.relpath(target, parent)
    with contextlib.suppress(OSError):
        if os.readlink(link) == relative:
            return
    tmp = os.path.join(parent, f".hr={hr}.{os.getpid()}.tmp")  # hidden: scanners skip it
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(relative, tmp)
    os.replace(tmp, link)
