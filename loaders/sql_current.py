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
from urllib.parse import urlparse

from ferry.loaders.catalog import PartitionCatalog, PartitionVersion


class ReaderTree:
    """``<base>/<table>/dt=D/hr=H`` links of a local warehouse, following the catalog's partitions.

    ``base`` is the local directory of the tree (``<root>/<db>.current``); None (a warehouse that is no local
    filesystem: symbolic links are a local filesystem's) makes :meth:`publish` do nothing, and readers go
    through the metastore."""

    def __init__(self, base: str | None, catalog: PartitionCatalog) -> None:
        self.base = base
        self.catalog = catalog

    def publish(self, versions: list[PartitionVersion]) -> None:
        """Point each hour's link at its version (idempotent); a table met for the first time gets links for
        all its partitions (warehouses from before the reader tree)."""
        if self.base is None:
            return
        done: set[str] = set()
        for v in versions:
            table = v.table.split(".")[-1].lower()
            base = os.path.join(self.base, table)
            if table not in done and not os.path.isdir(base):
                done.add(table)
                for (d, h), location in self.catalog.locations(table).items():
                    link_hour(base, d, h, urlparse(location).path)
            link_hour(base, v.dt, v.hr, urlparse(v.location).path)


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
