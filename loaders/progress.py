"""``ferry load --progress``: a progress bar per topic while the run's Spark job loads (on a terminal).

The executors report nothing until a split is done, so progress is counted in finished splits: Spark's
status tracker says how many tasks of the run's job finished, and tasks start in split order (splits are
sorted by topic, partition, offset), so the first finished ones are, nearly always, the first splits. A
bar moves by a split's messages at a time: good enough to see rows/s and an ETA on a long load, and free
(one status call every half second on the driver). Nothing is shown when stdout is not a terminal.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ferry.loaders.offsets import OffsetRange

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class LoadProgress:
    """Context manager around the collect() of the run's Spark job (job group ``group``)."""

    def __init__(self, spark: SparkSession, group: str, splits: Sequence[OffsetRange], enabled: bool = True,
                 interval_s: float = 0.5) -> None:
        self.spark, self.group, self.splits, self.interval_s = spark, group, list(splits), interval_s
        self.enabled = enabled and sys.stdout.isatty() and bool(self.splits)
        self._stop = threading.Event()
        self._failed = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LoadProgress:
        self.spark.sparkContext.setJobGroup(self.group, "ferry load", interruptOnCancel=False)
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="ferry-load-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._failed = exc_type is not None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)

    def finished_tasks(self) -> int:
        tracker = self.spark.sparkContext.statusTracker()
        done = 0
        for job in tracker.getJobIdsForGroup(self.group):
            info = tracker.getJobInfo(job)
            for stage in (info.stageIds if info else []):
                s = tracker.getStageInfo(stage)
                done += s.numCompletedTasks if s else 0
        return done

    def _run(self) -> None:
        # rich only when a bar is shown (--progress on a terminal)
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.text import Text

        class RowsPerSecond(ProgressColumn):
            def render(self, task) -> Text:
                return Text(f"{task.speed:,.0f} rows/s" if task.speed else "", style="progress.data.speed")

        totals: dict[str, int] = {}
        for s in self.splits:
            totals[s.topic] = totals.get(s.topic, 0) + s.size
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), RowsPerSecond(),
                      TimeElapsedColumn(), TimeRemainingColumn(), transient=False) as bars:
            ids = {t: bars.add_task(t, total=n) for t, n in totals.items()}
            while True:
                stopping = self._stop.wait(self.interval_s)
                try:
                    done = len(self.splits) if stopping and not self._failed else self.finished_tasks()
                except Exception:  # noqa: BLE001 - the display must never fail a load
                    done = 0
                completed = dict.fromkeys(totals, 0)
                for s in self.splits[:done]:
                    completed[s.topic] += s.size
                for t, task in ids.items():
                    bars.update(task, completed=completed[t])
                if stopping:
                    return
