"""A daemon thread that works in rounds when woken, for the registry's background duties.

kazoo's callbacks must not block, so they only wake such a thread; stopping it is bounded in time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class WakeableThread:
    """Owns one thread, its wake-up event and its stop event."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, loop: Callable[[], None]) -> None:
        """Run ``loop`` on the thread unless it runs already; ``loop`` calls next_round() until it says stop."""
        with self._lock:
            if self._thread is None:
                self._stopping.clear()
                self._thread = threading.Thread(target=loop, name=self.name, daemon=True)
                self._thread.start()
        self._wake.set()

    def wake(self) -> None:
        """Ask for a round (never blocks: safe on kazoo's threads)."""
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def woken(self) -> bool:
        """A round has been asked for since this one began."""
        return self._wake.is_set()

    def next_round(self) -> bool:
        """Block until woken (True: do a round) or stopped (False: return from the loop)."""
        while not self._stopping.is_set():
            if self._wake.wait(timeout=1.0):
                self._wake.clear()
                return not self._stopping.is_set()
        return False

    def pause(self, seconds: float) -> None:
        """Sleep between retries, cut short by stop()."""
        self._stopping.wait(seconds)

    def request_stop(self) -> None:
        """Tell the loop to end (and anything waiting on ``stopping`` to give up) without waiting for it."""
        self._stopping.set()
        self._wake.set()

    def stop(self, timeout: float) -> None:
        """request_stop(), then wait up to ``timeout`` seconds for the thread to end."""
        self.request_stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout)
        self._thread = None
