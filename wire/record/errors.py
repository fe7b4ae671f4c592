"""Errors raised by the storage layer.

Each carries the Kafka error code the server answers with, so the protocol layer can map an
exception to a response without a table of its own (``exc.kafka_error_code``).
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class: a request the log refused. Nothing was written."""

    kafka_error_code: int = -1  # UNKNOWN_SERVER_ERROR


class KafkaStorageError(StorageError):
    """The log directory cannot be written or read (disk full, read-only, failing device, a failed fsync).

    The directory is taken offline at the first such error (Kafka's LogDirFailureChannel): an append
    that failed left nothing behind (its bytes were cut off, or the directory went offline before the
    append was counted), and no later call touches the directory's logs until it works again.
    """

    kafka_error_code = 56  # KAFKA_STORAGE_ERROR


class LogOffsetOutOfRangeError(StorageError):
    """A fetch asked for an offset below the log start or above the log end."""

    kafka_error_code = 1  # OFFSET_OUT_OF_RANGE


class CorruptRecordError(StorageError):
    """Bytes that do not parse as record batches, or a CRC-32C mismatch (``offset``: the bad batch's
    baseOffset where the raiser knows it, else -1)."""

    kafka_error_code = 2  # CORRUPT_MESSAGE

    def __init__(self, message: str, offset: int = -1) -> None:
        super().__init__(message)
        self.offset = offset


class RecordTooLargeError(StorageError):
    """A batch larger than max.message.bytes (or than a segment)."""

    kafka_error_code = 10  # MESSAGE_TOO_LARGE


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer skipped a sequence number (a batch was lost in between)."""

    kafka_error_code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(StorageError):
    """A sequence older than the cached window: already written, offsets unknown."""

    kafka_error_code = 46  # DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """A producer epoch older than the one this partition has seen (a fenced producer)."""

    kafka_error_code = 47  # INVALID_PRODUCER_EPOCH


class InvalidRecordError(StorageError):
    """Well-formed bytes the broker does not accept (old magic, control or transactional batch, ...)."""

    kafka_error_code = 87  # INVALID_RECORD


class OffsetMismatchError(StorageError):
    """A replica's append does not start at the log end offset, or its batches' offsets are not consecutive
    (the follower must truncate or refetch; nothing was written)."""

    kafka_error_code = -1  # UNKNOWN_SERVER_ERROR: Kafka has no code for it (UnexpectedAppendOffsetException)


class FencedLeaderEpochError(StorageError):
    """An append as leader with an epoch older than one the log already holds (a stale leader)."""

    kafka_error_code = 74  # FENCED_LEADER_EPOCH
