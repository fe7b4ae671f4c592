"""Kafka protocol error codes (the numbers are the wire contract; names follow Kafka's Errors enum)."""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    PRODUCER_FENCED = 90  # KIP-588: a newer producer with the same transactional.id took over
    UNKNOWN_TOPIC_ID = 100  # KIP-516: a topic id no topic has
    TRANSACTIONAL_ID_NOT_FOUND = 105  # DescribeTransactions of an id the coordinator does not know
    FENCED_MEMBER_EPOCH = 110  # KIP-848: the member's epoch is not the coordinator's; it must rejoin
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128  # KIP-848: a subscription's regex does not compile


def error_name(code: int) -> str:
    """The Kafka name of an error code ("UNKNOWN" for a code this broker does not know)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return "UNKNOWN"


def error_code_of(exc: BaseException, default: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR) -> ErrorCode:
    """The Kafka error code an exception carries (storage and registry errors set `kafka_error_code`)."""
    code = getattr(exc, "kafka_error_code", None)
    if code is None:
        return default
    try:
        return ErrorCode(int(code))
    except ValueError:
        return default


class ClientError(Exception):
    """Base class of the errors a client of the protocol sees; every message is fit to show a CLI user.

    Defined at the protocol layer, below the registry and the client, so that an error both can raise
    (an unknown topic) is one class."""


class KafkaResponseError(ClientError):
    """A broker answered with an error code (``code``, ``error_name``)."""

    CODE: ClassVar[int | None] = None  # the code a subclass stands for (ferry.client.errors.for_code)

    def __init__(self, code: int, what: str) -> None:
        self.error_name = error_name(code)
        super().__init__(f"{what}: error {code} ({self.error_name})")
        self.code = code
