"""Replace a small file so that a crash leaves the old or the new content, never a torn one.

Used for the broker's checkpoints, producer-state snapshots and topic configs, and the loaders' ledger.
Each caller says how durable the write must be: fsync of the file before the rename, and of the
directory after it (so the rename itself survives a power loss).
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: str | os.PathLike) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, data: bytes, *, fsync: bool = True, sync_dir: bool = True) -> None:
    """Write ``data`` to a temporary file beside ``path`` (named ``.NAME.PID.tmp``), then rename it over."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)
