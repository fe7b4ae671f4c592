"""Moving a log's start offset on request (DeleteRecords), and keeping it across restarts.

Retention moves ``log_start_offset`` to a segment boundary; DeleteRecords (KIP-107) moves it to any offset up
to the high watermark: records below it are no longer readable (Fetch and ListOffsets earliest answer from the
new start) and every whole segment below it is deleted (renamed ``.deleted``, removed after
``file.delete.delay.ms`` like retention's). The active segment and a segment holding the new start stay.

A start inside a segment cannot be recovered from the files (recovery starts a log at its first segment's base
offset), so it is written to ``<partition dir>/log-start-offset`` (one decimal line, replaced atomically)
and read back with ``restore_log_start`` when the broker opens its logs. Kafka keeps the same number in its
``log-start-offset-checkpoint``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ferry.wire.atomic_file import atomic_write
from ferry.wire.record.errors import KafkaStorageError, LogOffsetOutOfRangeError

logger = logging.getLogger("ferry.log")

LOG_START_FILE = "log-start-offset"


def delete_records_before(log: Any, offset: int) -> int:
    """Make ``offset`` the log's start (records below it are gone); returns the new log start offset.

    ``offset`` must be at most the high watermark (LogOffsetOutOfRangeError otherwise, nothing changed); an
    offset at or below the current start changes nothing. KafkaStorageError when the log is offline."""
    with log._lock:
        if log.offline:
            raise log.offline_error()
        if offset > log.high_watermark:
            raise LogOffsetOutOfRangeError(f"offset {offset} is above the high watermark {log.high_watermark} "
                                           f"of {log.name}")
        if offset <= log.log_start_offset:
            return log.log_start_offset
        _move_start(log, offset)
        try:
            atomic_write(Path(log.dir) / LOG_START_FILE, f"{offset}\n".encode())
        except OSError as e:
            raise log.storage_failure("writing the log start offset", e) from e
        logger.info("%s: records before %d deleted on request; log start offset is now %d", log.name, offset,
                    log.log_start_offset)
        return log.log_start_offset


def restore_log_start(log: Any) -> bool:
    """Apply the start offset a DeleteRecords saved (if the log still reaches it); True when it moved."""
    path = Path(log.dir) / LOG_START_FILE
    try:
        saved = int(path.read_text().strip())
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as e:
        logger.warning("%s: ignoring %s: %s", log.name, path, e)
        return False
    with log._lock:
        if log.offline or saved <= log.log_start_offset or saved > log.log_end_offset:
            return False  # older than what retention or truncation did since, or the log no longer has it
        _move_start(log, saved)
    logger.info("%s: log start offset %d restored (DeleteRecords)", log.name, saved)
    return True


def _move_start(log: Any, offset: int) -> None:
    """Under the log's lock: set the start and retire whole segments entirely below it."""
    log.log_start_offset = offset
    segments = log._segments
    n = 0
    while n < len(segments) - 1 and segments[n].next_offset <= offset:
        n += 1
    if n:
        doomed = segments[:n]
        log._segments = segments[n:]
        log._bases = log._bases[n:]
        deadline = log._clock() + log.config.file_delete_delay_ms
        log._pending_deletes.extend((deadline, seg) for seg in doomed)
        try:
            for seg in doomed:
                seg.mark_deleted()
        except OSError as e:
            raise log.storage_failure("deleting records", e) from e
    log.leader_epoch_cache.truncate_from_start(offset)
    if log.replication_hw is not None and log.replication_hw < offset:
        log.replication_hw = offset  # a high watermark is never below the log start


__all__ = ["LOG_START_FILE", "KafkaStorageError", "delete_records_before", "restore_log_start"]
