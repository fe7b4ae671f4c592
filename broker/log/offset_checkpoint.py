"""Kafka's offset checkpoint file (OffsetCheckpointFile): a version line, a count line, then one
``topic partition offset`` line per partition; replaced atomically."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from ferry.wire.atomic_file import atomic_write

logger = logging.getLogger("ferry.log")


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's offset checkpoint format: version line, count line, ``topic partition offset`` lines."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    try:
        if lines[0].strip() != "0":
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        result: dict[tuple[str, int], int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split()
            result[(topic, int(partition))] = int(offset)
        if len(result) != count:
            raise ValueError(f"expected {count} entries, found {len(result)}")
        return result
    except (IndexError, ValueError) as exc:
        # Losing the checkpoint only costs a longer recovery: verify every log's last segment.
        logger.warning("ignoring damaged checkpoint %s: %s", path, exc)
        return {}


def write_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    lines = ["0", str(len(offsets))] + [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    atomic_write(path, ("\n".join(lines) + "\n").encode())
