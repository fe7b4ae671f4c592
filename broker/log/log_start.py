"""Moving a log's start offset on request (DeleteRecords, KIP-107), and keeping it across restarts: the
entry points the server and the log manager call (log_retention.py does the work)."""

from __future__ import annotations

from ferry.broker.log.log import Log
from ferry.broker.log.log_retention import LOG_START_FILE
from ferry.wire.record.errors import KafkaStorageError


def delete_records_before(log: Log, offset: int) -> int:
    """Make ``offset`` the log's start (records below it are gone); returns the new log start offset.

    ``offset`` must be at most the high watermark (LogOffsetOutOfRangeError otherwise, nothing changed); an
    offset at or below the current start changes nothing. KafkaStorageError when the log is offline."""
    return log.delete_records_before(offset)


def restore_log_start(log: Log) -> bool:
    """Apply the start offset a DeleteRecords saved (if the log still reaches it); True when it moved."""
    return log.restore_log_start()


__all__ = ["LOG_START_FILE", "KafkaStorageError", "delete_records_before", "restore_log_start"]
