"""Whether a partition's log may touch its files: open, closed, or offline after an IO error.

Kafka's rule: the first IO error takes the directory offline. An OSError from a write, an fsync, a roll or a
truncation (ENOSPC, EIO, EROFS ...) means the directory can no longer be trusted to hold what is acknowledged.
Retrying is worse than stopping: after a failed fdatasync Linux may already have dropped the dirty pages, so a
later fsync that "succeeds" would let flushed_offset pass data that never reached the disk. So the log is marked
offline at once, the failure is reported (LogManager takes every log of the directory offline and tells the
server, which moves leadership away), and from then on every call that would touch the files raises
KafkaStorageError (Kafka's KAFKA_STORAGE_ERROR, 56) without touching them. flushed_offset never moves again on
this object; when the directory works again the LogManager opens the logs anew, with recovery, as at start-up.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable

from ferry.wire.record.errors import KafkaStorageError, StorageError

logger = logging.getLogger("ferry.log")

# called once, with (log name, what failed, the OSError), on a log's first IO error
IoFailureHook = Callable[[str, str, OSError], None]


def describe_os_error(exc: OSError) -> str:
    """``ENOSPC (No space left on device)``: the errno's name says what happened in one word."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{name} ({text})" if name else text


class LogStatus:
    """Open, closed or offline: plain attributes, because every append and read checks them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.offline = False  # the directory failed: nothing touches the files any more
        self.io_failed: IoFailureHook | None = None  # set by LogManager

    def check_open(self) -> None:
        """Refuse a closed or offline log (StorageError, KafkaStorageError)."""
        if self.closed:
            raise StorageError(f"log {self.name} is closed")
        if self.offline:
            raise self.offline_error()

    def storage_failure(self, what: str, exc: OSError) -> KafkaStorageError:
        """Take the log offline because ``what`` failed with ``exc``; returns the error to raise.

        Only the first failure is reported (and logged, by the LogManager or here for a log without one):
        one line per condition, not one per request."""
        first = not self.offline
        self.offline = True
        if first:
            if self.io_failed is not None:
                self.io_failed(self.name, what, exc)
            else:
                logger.error("%s is offline: %s failed: %s", self.name, what, describe_os_error(exc))
        return KafkaStorageError(f"{self.name}: {what} failed: {describe_os_error(exc)}; the log directory is "
                                 "offline")

    def mark_offline(self) -> None:
        """Another log of the same directory failed: stop touching this one's files too."""
        self.offline = True

    def offline_error(self) -> KafkaStorageError:
        return KafkaStorageError(f"the log directory of {self.name} is offline")
