"""Where a load's work ran: tasks and rows per executor (and the worker that hosted it), from the driver UI's
REST API (``<uiWebUrl>/api/v1/applications/<appId>/...``). SparkContext.statusTracker has no per-executor
task view; the REST API has it while the session lives, so the job reads it before the session stops.

The rows of a split come back in its stats (split_load.py, kind ``split``); the successful attempt of the
split's task (task index == split index) names the executor that wrote them. A split rerun after a lost
executor counts once, on the executor whose attempt succeeded; the lost attempts show as failed tasks.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections import defaultdict
from dataclasses import asdict, dataclass
from urllib.parse import urlparse

from pyspark.sql import SparkSession

log = logging.getLogger("ferry.load.executors")


@dataclass
class ExecutorShare:
    executor: str
    host: str  # the executor's host:port
    worker: str  # the worker's web UI (host:port) in standalone mode, else the executor's host
    tasks: int = 0  # this load's task attempts that succeeded on it
    failed_tasks: int = 0
    rows: int = 0
    task_seconds: float = 0.0  # the successful attempts' run time

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.task_seconds if self.task_seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "rows_per_s": round(self.rows_per_s, 1)}

    def describe(self) -> str:
        return (f"executor {self.executor} on {self.worker}: {self.tasks} task(s)"
                + (f" (+{self.failed_tasks} failed)" if self.failed_tasks else "")
                + f", {self.rows} rows, {self.rows_per_s:,.0f} rows/s of task time")


class ExecutorReport:
    """Reads the driver's REST API for the stages of one job group (a load's Spark job)."""

    def __init__(self, spark: SparkSession, timeout_s: float = 10.0) -> None:
        self.spark, self.timeout_s = spark, timeout_s

    @property
    def api(self) -> str | None:
        """The application's REST root, or None when the UI is off (local mode keeps it off)."""
        sc = self.spark.sparkContext
        url = sc.uiWebUrl
        return f"{url.rstrip('/')}/api/v1/applications/{sc.applicationId}" if url else None

    def _get(self, path: str) -> list | dict:
        with urllib.request.urlopen(f"{self.api}{path}", timeout=self.timeout_s) as r:
            return json.load(r)

    def shares(self, group: str, split_rows: dict[int, int]) -> list[ExecutorShare]:
        """One ExecutorShare per executor that ran a task of ``group``'s jobs; [] when the UI is off or the
        REST API does not answer (a report, never a reason to fail a committed load)."""
        if self.api is None:
            return []
        try:
            return self._shares(group, split_rows)
        except (OSError, ValueError, KeyError) as e:
            log.warning("no per-executor report: %s", e)
            return []

    def _shares(self, group: str, split_rows: dict[int, int]) -> list[ExecutorShare]:
        tracker = self.spark.sparkContext.statusTracker()
        stages = sorted({s for j in tracker.getJobIdsForGroup(group)
                         for s in (tracker.getJobInfo(j).stageIds if tracker.getJobInfo(j) else [])})
        executors = {e["id"]: e for e in self._get("/allexecutors")}
        out: dict[str, ExecutorShare] = {}
        done: dict[int, str] = {}  # split index -> executor of its successful attempt
        seconds: dict[str, float] = defaultdict(float)
        for stage in stages:
            for attempt in self._get(f"/stages/{stage}?details=true"):
                for task in (attempt.get("tasks") or {}).values():
                    ex = str(task.get("executorId"))
                    share = out.get(ex) or out.setdefault(ex, self._share(ex, executors.get(ex, {})))
                    if task.get("status") == "SUCCESS":
                        share.tasks += 1
                        seconds[ex] += task.get("duration", 0) / 1000
                        done[int(task["index"])] = ex
                    elif task.get("status") in ("FAILED", "KILLED"):
                        share.failed_tasks += 1
        for split, rows in split_rows.items():
            if split in done:
                out[done[split]].rows += rows
        for ex, share in out.items():
            share.task_seconds = round(seconds[ex], 3)
        return sorted(out.values(), key=lambda s: (s.worker, s.executor))

    @staticmethod
    def _share(executor: str, info: dict) -> ExecutorShare:
        host = info.get("hostPort", "")
        logs = (info.get("executorLogs") or {}).get("stdout", "")
        worker = urlparse(logs).netloc if logs else host.rsplit(":", 1)[0]
        return ExecutorShare(executor, host, worker)
