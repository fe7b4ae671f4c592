"""The log manager's two threads (Kafka runs the same tasks on its scheduler): the flusher, woken by an append
that wants a flush or every tick, which also writes the checkpoints now and then; and retention."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger("ferry.log")


class LogScheduler:
    """Runs ``flush_pass`` every ``tick_seconds()`` (or when woken), ``checkpoint`` every
    ``checkpoint_interval_ms`` after a flush pass, and ``retention_pass`` every ``retention_interval_ms``."""

    def __init__(self, clock: Callable[[], int], flush_pass: Callable[[], int], checkpoint: Callable[[], None],
                 retention_pass: Callable[[], int], tick_seconds: Callable[[], float], checkpoint_interval_ms: int,
                 retention_interval_ms: int) -> None:
        self._clock = clock
        self._flush_pass = flush_pass
        self._checkpoint = checkpoint
        self._retention_pass = retention_pass
        self._tick_seconds = tick_seconds
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.retention_interval_ms = retention_interval_ms
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def wake(self) -> None:
        """An append wants a flush: run a flush pass now rather than at the next tick."""
        self._wake.set()

    def start(self) -> None:
        """Start the flusher and retention threads (daemon threads; stop with stop())."""
        if self._threads:
            return
        for target, name in ((self._flusher, "ferry-log-flusher"), (self._retainer, "ferry-log-retention")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=30)
        self._threads = []

    def _flusher(self) -> None:
        last_checkpoint = self._clock()
        while not self._stop.is_set():
            self._wake.wait(self._tick_seconds())
            self._wake.clear()
            if self._stop.is_set():
                break
            self._flush_pass()
            now = self._clock()
            if now - last_checkpoint >= self.checkpoint_interval_ms:
                last_checkpoint = now
                try:
                    self._checkpoint()
                except OSError:
                    logger.exception("could not write the recovery point checkpoint")

    def _retainer(self) -> None:
        while not self._stop.wait(self.retention_interval_ms / 1000):
            self._retention_pass()
