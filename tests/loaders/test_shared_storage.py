"""The driver's check of a cluster load's files (split_load.rows_written): the rows in the footers of the
files a run's splits wrote, as the driver sees them. A worker without the shared warehouse mount writes to its
own disk; the driver then sees fewer rows than the executors reported and the run fails before its commit."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ferry.loaders.split_load import HourFiles, rows_written


def _write(root: Path, run_id: str, split: int, hours: dict[tuple[str, str], int]) -> None:
    files = HourFiles(str(root), run_id, split)
    for (d, h), n in hours.items():
        files.add(d, h, pa.table({"x": list(range(n))}))
    files.close()


def test_rows_written_counts_the_runs_files_only(tmp_path: Path):
    root = tmp_path / "warehouse" / "db" / "t"
    _write(root, "run-a", 0, {("2026-11-28", "10"): 30, ("2026-11-28", "11"): 5})
    _write(root, "run-a", 1, {("2026-11-28", "10"): 7})
    _write(root, "run-b", 0, {("2026-11-28", "10"): 100})  # another run's version of the hour
    hours = [("2026-11-28", "10"), ("2026-11-28", "11")]
    assert rows_written(str(root), "run-a", hours) == 42
    assert rows_written(str(root), "run-b", hours) == 100
    assert rows_written(str(root), "run-c", hours) == 0  # nothing there at all: no error, zero rows
    # an unfinished attempt (hidden .inprogress file) is not counted
    (root / "dt=2026-11-28" / "hr=11" / "ferry_run=run-a" / ".part-00009-000-run-a.parquet.x.inprogress").write_bytes(b"x")
    assert rows_written(str(root), "run-a", hours) == 42


def test_a_split_written_elsewhere_is_missing(tmp_path: Path):
    """What a worker without the mount does: its split lands under another root; the driver's root lacks it."""
    shared, workers_disk = tmp_path / "shared" / "t", tmp_path / "worker-local" / "t"
    _write(shared, "run-a", 0, {("2026-11-28", "10"): 30})
    _write(workers_disk, "run-a", 1, {("2026-11-28", "10"): 12})
    assert rows_written(str(shared), "run-a", [("2026-11-28", "10")]) == 30  # the executors reported 42
