"""The data directory's health (LogManager's collaborator): offline at the first IO error, probed, re-opened.

Kafka's LogDirFailureChannel with one directory per broker (``log.dirs`` takes one here). The first OSError
any log reports (append, roll, flush, truncation, snapshot, checkpoint) takes the whole directory offline:
every log stops touching its files (KafkaStorageError from then on), the condition is logged once, and
the listeners (the server's LogDirFailureHandler) move leadership away. Nothing is retried in place: an
fsync that failed may have lost pages that a later fsync would not report.

When the directory works again (``probe``: a small write and fsync succeed), LogManager.reopen closes the old
logs without writing and opens them anew as at start-up: the recovery points are the offsets each log had
really flushed, everything after them is verified batch by batch (CRC-32C) and a torn tail is cut, after
the page cache of the segment files was dropped so that recovery reads what the device holds rather than
pages whose write-back failed.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from ferry.broker.log.log import Log
from ferry.broker.log.log_offline import describe_os_error
from ferry.broker.log.log_segment import LOG_SUFFIX

logger = logging.getLogger("ferry.log")

PROBE_FILE = ".ferry-probe"
PROBE_BYTES = 64 * 1024  # a little room, not one free block: a directory that comes back must take appends
DirFailureListener = Callable[[Path, str], None]


class LogDirHealth:
    """Offline state, failure listeners, probe and the retired logs of the data directory."""

    def __init__(self, data_dir: Path, clock: Callable[[], int], logs: Callable[[], list[Log]]) -> None:
        self.data_dir = data_dir
        self._clock = clock
        self._logs = logs  # the logs open now: all of them stop touching their files when the directory fails
        self.offline = False
        self.offline_reason = ""
        self._lock = threading.Lock()
        self._failure_listeners: list[DirFailureListener] = []
        self._retired: list[tuple[int, Log]] = []  # (close after, old Log) replaced by a re-open

    @property
    def offline_log_dirs(self) -> int:
        """How many log directories are offline (0 or 1: one per broker); Kafka's OfflineLogDirectoryCount."""
        return 1 if self.offline else 0

    def add_dir_failure_listener(self, callback: DirFailureListener) -> None:
        """``callback(data_dir, reason)`` runs once each time the directory goes offline, in the thread that
        hit the error (a request's, the flusher's): it must not block."""
        self._failure_listeners.append(callback)

    def log_failed(self, name: str, what: str, exc: OSError) -> None:
        """A Log's io_failed hook."""
        self.dir_failed(f"{what} of {name}", exc)

    def dir_failed(self, what: str, exc: OSError) -> None:
        """Take the directory offline (once): every log stops touching its files, one line is logged, the
        listeners are told."""
        with self._lock:
            if self.offline:
                return
            self.offline = True
            logs = self._logs()
        for lg in logs:
            lg.mark_offline()
        self.offline_reason = f"{what} failed: {describe_os_error(exc)}"
        logger.error("log dir %s is offline: %s; its %d partition(s) answer KAFKA_STORAGE_ERROR until it can be "
                     "written again", self.data_dir, self.offline_reason, len(logs))
        for cb in list(self._failure_listeners):
            try:
                cb(self.data_dir, self.offline_reason)
            except Exception:
                logger.exception("log dir failure listener %r failed", cb)

    def back_online(self) -> None:
        with self._lock:
            self.offline = False
            self.offline_reason = ""

    def retire(self, logs: Iterable[Log], file_delete_delay_ms: int) -> None:
        """Old Log objects, offline: closed file.delete.delay.ms later, not now, because a fetch answered before
        the failure may still be sending from their fds (closed at once, the fd number could be reused)."""
        deadline = self._clock() + file_delete_delay_ms
        with self._lock:
            for lg in logs:
                lg.mark_offline()
                self._retired.append((deadline, lg))

    def close_retired(self, force: bool = False) -> None:
        """Close the retired logs whose delay is over (all of them with ``force``: at shutdown)."""
        if not self._retired:
            return
        now = self._clock()
        with self._lock:
            due = [lg for deadline, lg in self._retired if force or deadline <= now]
            self._retired = [(d, lg) for d, lg in self._retired if not (force or d <= now)]
        for lg in due:
            lg.close()

    def probe(self) -> bool:
        """Whether the directory takes a small write and its fsync again (PROBE_BYTES, then removed)."""
        path = self.data_dir / PROBE_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                data = memoryview(bytes(PROBE_BYTES))
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)
            finally:
                os.close(fd)
            return True
        except OSError:
            return False
        finally:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass


def drop_page_cache(directory: Path) -> None:
    """Evict the segment files' clean pages (POSIX_FADV_DONTNEED), so that recovery reads the device: a page
    whose write-back failed stays cached as clean and would otherwise pass for data on disk."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not name.endswith(LOG_SUFFIX):
            continue
        try:
            fd = os.open(directory / name, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        finally:
            os.close(fd)
