"""SyncLoop: a background pass that runs when a ZooKeeper watch fires and, to retry, every interval.

The mirror keeps two things of the offline cluster in step with the live one (topics, schemas): each is
a pass that is cheap to repeat, woken by a watch and retried on a timer after a failure. The loop owns the
thread and its timing; the pass and what a failure means belong to its owner (TopicSync, SchemaSync).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("ferry.mirror")


class SyncLoop:
    def __init__(self, name: str, interval_s: float, run_pass: Callable[[], object],
                 pass_failed: Callable[[Exception], None] | None = None) -> None:
        """``run_pass``: one pass (raising counts as a failed one); ``pass_failed``: told of each failure
        (default: logged with its traceback, retried after ``interval_s``)."""
        self.interval_s = interval_s
        self._run_pass = run_pass
        self._pass_failed = pass_failed or self._log_failure
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        self._thread.start()

    def _log_failure(self, exc: Exception) -> None:
        log.exception("%s pass failed; retrying in %.0f s", self._thread.name, self.interval_s)

    def wake(self) -> None:
        """Something changed: run a pass now."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self._run_pass()
            except Exception as exc:
                self._pass_failed(exc)
