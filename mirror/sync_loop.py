"""SyncLoop: a background pass that runs when a ZooKeeper watch fires and, to retry, every interval.

The mirror keeps two things of the offline cluster in step with the live one (topics, schemas): each is
a pass that is cheap to repeat, woken by a watch and retried on a timer after a failure.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("ferry.mirror")


class SyncLoop:
    def __init__(self, name: str, interval_s: float) -> None:
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def run_pass(self) -> bool:
        """One pass; True when nothing is left to do. Raising counts as a failed pass."""
        raise NotImplementedError

    def pass_failed(self, exc: Exception) -> None:
        log.exception("%s pass failed; retrying in %.0f s", self._thread.name, self.interval_s)

    def wake(self) -> None:
        """Something changed: run a pass now."""
        self._synced.clear()
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
                if self.run_pass():
                    self._synced.set()
            except Exception as exc:
                self.pass_failed(exc)
