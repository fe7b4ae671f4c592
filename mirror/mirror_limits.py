"""The mirror stream's limits and the broker answers it sorts into kinds (shared by its parts)."""

from __future__ import annotations

import logging

from ferry.mirror.partition_mirror import PartitionMirror, PendingBatch
from ferry.wire.protocol.errors import ErrorCode

log = logging.getLogger("ferry.mirror")

Slot = tuple[PartitionMirror, list[PendingBatch]]  # consecutive batches of one partition in one request

MAX_IN_FLIGHT = 5  # per partition: the offline broker remembers the last 5 batches of a producer
MAX_PENDING_BYTES = 8 << 20  # per partition: stop fetching ahead beyond this
MAX_STREAM_PENDING_BYTES = 64 << 20  # per stream: bounds memory however many partitions it owns
MAX_PRODUCE_REQUEST_BYTES = 16 << 20
FETCH_RESPONSE_MAX_BYTES = 32 << 20
FETCH_WAIT_MS = 500  # long poll when idle: also bounds how long an ownership change waits
IN_FLIGHT_FETCH_WAIT_MS = 20  # long poll while produce answers are due: they are read when it returns
METADATA_MIN_INTERVAL_S = 0.2
COALESCE_BYTES = 960 << 10  # small fetched batches are re-built into batches of about this size (< Kafka's 1 MiB message.max.bytes)
MIN_COALESCE_BYTES = 1 << 10  # a partition whose coalesce limit would fall below this stops coalescing
TOO_LARGE_ERRORS = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE})

PRODUCER_STATE_ERRORS = frozenset({
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.UNKNOWN_PRODUCER_ID,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
})
# Answers after which the batches may or may not have been written.
UNKNOWN_OUTCOME_ERRORS = frozenset({
    ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
})
# Errors that retrying alone will not cure: logged at ERROR level (still retried, never skipped).
FATAL_LOOKING = frozenset({
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.INVALID_RECORD, ErrorCode.INVALID_REQUIRED_ACKS, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.INVALID_TIMESTAMP,
})


def code_name(code: int) -> str:
    """An answer's error name for the logs (its number if this build does not know it)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
